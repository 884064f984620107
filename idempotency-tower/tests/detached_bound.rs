//! Handlers whose clients left run to their end in the background, bounded in number: beyond
//! the bound, new guarded requests are refused 503 + `Retry-After` (never a running handler
//! abandoned), and once one ends, requests run again.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use common::{Calls, post_with_key, problem, read, routes, unique};
use idempotency_core::{IdempotencyKey, MemoryStore, RecordState, Scope, Store};
use idempotency_tower::IdempotencyLayer;
use tower::ServiceExt;

#[tokio::test]
async fn departed_clients_handlers_are_bounded_and_never_abandoned() {
    let store = Arc::new(MemoryStore::new());
    let calls = Arc::new(Calls::default());
    let layer = IdempotencyLayer::builder(Arc::clone(&store))
        .shared_scope()
        .max_detached(1)
        .build();
    let app = routes(Arc::clone(&calls)).layer(layer);

    // A client sends a request whose handler waits, then goes away.
    let left = unique("left");
    let started = calls.held_started.notified();
    let request = tokio::spawn(
        app.clone()
            .oneshot(post_with_key("/held", Some(&left), "{}")),
    );
    started.await;
    request.abort();
    assert!(request.await.unwrap_err().is_cancelled());

    // Its handler still runs, so new guarded requests are refused for now.
    let refused = app
        .clone()
        .oneshot(post_with_key("/orders", Some(&unique("next")), "{}"))
        .await
        .unwrap();
    let retry_after = refused.headers().get("retry-after").cloned();
    let body = problem(refused, 503).await;
    assert_eq!(body["type"], "urn:idempotency:overloaded");
    assert!(retry_after.is_some());
    assert_eq!(calls.orders.load(Ordering::SeqCst), 0);

    // The handler ends and its answer is stored; then requests run again.
    calls.held_release.notify_one();
    let key = Scope::new("http").storage_key(&IdempotencyKey::parse(&left).unwrap());
    loop {
        let record = store.get(&key).await.unwrap();
        if record.is_some_and(|record| record.state == RecordState::Completed) {
            break;
        }
        tokio::task::yield_now().await;
    }
    // The count drops when the detached task ends, just after it stored the answer.
    let mut status = 0;
    for _ in 0..10_000 {
        let response = app
            .clone()
            .oneshot(post_with_key("/orders", Some(&unique("after")), "{}"))
            .await
            .unwrap();
        status = read(response).await.0.as_u16();
        if status != 503 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(status, 201);
    assert_eq!(calls.held.load(Ordering::SeqCst), 1);
}

/// A departed client's handler runs under the tracker the application gave the layer: a
/// shutdown waits for it, and returns once its answer is stored.
#[tokio::test]
async fn a_shutdown_waits_for_departed_clients_handlers() {
    use idempotency_core::background::Tracker;
    use std::time::Duration;

    let store = Arc::new(MemoryStore::new());
    let calls = Arc::new(Calls::default());
    let tracker = Tracker::new();
    let layer = IdempotencyLayer::builder(Arc::clone(&store))
        .shared_scope()
        .tracker(tracker.clone())
        .build();
    assert_eq!(layer.tracker().pending(), 0);
    let app = routes(Arc::clone(&calls)).layer(layer);

    let left = unique("left");
    let started = calls.held_started.notified();
    let request = tokio::spawn(app.oneshot(post_with_key("/held", Some(&left), "{}")));
    started.await;
    request.abort();
    assert!(request.await.unwrap_err().is_cancelled());

    // The handler is held: the shutdown's bound passes with it still running.
    assert_eq!(tracker.pending(), 1);
    assert!(!tracker.shutdown(Duration::from_millis(20)).await);
    calls.held_release.notify_one();
    assert!(tracker.shutdown(Duration::from_secs(30)).await);
    let key = Scope::new("http").storage_key(&IdempotencyKey::parse(&left).unwrap());
    let record = store.get(&key).await.unwrap().unwrap();
    assert_eq!(
        record.state,
        RecordState::Completed,
        "stored before the shutdown returned"
    );
}
