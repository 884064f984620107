//! Duplicates waiting for one in-flight key through the HTTP layer on Redis: they share one
//! wait, and beyond the bound a duplicate is answered 409 + `Retry-After` at once; those
//! within it get the first one's answer.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{Calls, post_with_key, problem, read, routes, unique};
use idempotency_redis::RedisStore;
use idempotency_test::unavailable;
use idempotency_tower::IdempotencyLayer;
use tower::ServiceExt;

#[tokio::test]
async fn beyond_the_bound_a_duplicate_is_answered_409_at_once() {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let store = match RedisStore::connect(&url).await {
        Ok(store) => store.with_key_prefix("test:tower-waiting-bound:"),
        Err(error) => return unavailable("Redis", error).unwrap_or(()),
    };
    let layer = IdempotencyLayer::builder(store)
        .shared_scope()
        .wait_in_flight(Duration::from_secs(600))
        .max_waiters_per_key(2)
        .build();
    let engine = layer.engine().clone();
    let calls = Arc::new(Calls::default());
    let app = routes(Arc::clone(&calls)).layer(layer);
    let key = unique("bound");

    let started = calls.held_started.notified();
    let first = tokio::spawn(
        app.clone()
            .oneshot(post_with_key("/held", Some(&key), "{}")),
    );
    started.await;
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            tokio::spawn(
                app.clone()
                    .oneshot(post_with_key("/held", Some(&key), "{}")),
            )
        })
        .collect();
    while engine.in_flight_waiters() < 2 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    // A third, beyond the bound: answered now, while the first still runs.
    let beyond = app
        .clone()
        .oneshot(post_with_key("/held", Some(&key), "{}"))
        .await
        .unwrap();
    assert!(beyond.headers().contains_key("retry-after"));
    let body = problem(beyond, 409).await;
    assert_eq!(body["type"], "urn:idempotency:in-flight");

    calls.held_release.notify_one();
    let (status, _, answer) = read(first.await.unwrap().unwrap()).await;
    assert_eq!(status, 200);
    for waiter in waiters {
        let (status, headers, body) = read(waiter.await.unwrap().unwrap()).await;
        assert_eq!(status, 200);
        assert_eq!(headers["idempotent-replayed"], "true");
        assert_eq!(body, answer);
    }
    assert_eq!(calls.held.load(Ordering::SeqCst), 1);
}
