//! A deploy that changes the fingerprint (the whole request → the order's business fields) must
//! not turn a retry in flight, or a retry of a request already answered, into a 422: with the
//! previous fingerprint read (`previous_fingerprint`), such a retry is a duplicate, answered
//! with the stored response or as in flight, and nothing runs twice. On Redis (`REDIS_URL`,
//! default `redis://127.0.0.1:6379`) and PostgreSQL (`DATABASE_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use common::{Calls, post_with_key, read, routes, unique};
use idempotency_core::{IdempotencyKey, Scope, Store};
use idempotency_redis::RedisStore;
use idempotency_test::unavailable;
use idempotency_tower::{FingerprintSource, IdempotencyLayer};
use tower::ServiceExt;

/// The routes behind a layer over `store` in `namespace`: before the deploy (the whole request
/// fingerprinted), after it (the order's fields), and after it reading the previous one.
fn apps<S: Store + Clone>(
    store: &S,
    namespace: &str,
    calls: &Arc<Calls>,
) -> (axum::Router, axum::Router, axum::Router) {
    let builder = || {
        IdempotencyLayer::builder(store.clone())
            .namespace(namespace.to_owned())
            .shared_scope()
    };
    let before = routes(Arc::clone(calls)).layer(builder().build());
    let after = || builder().fingerprint_json_fields(["/order_id", "/amount"]);
    let changed = routes(Arc::clone(calls)).layer(after().build());
    let reading = routes(Arc::clone(calls)).layer(
        after()
            .previous_fingerprint(FingerprintSource::Request)
            .build(),
    );
    (before, changed, reading)
}

async fn retries_survive_a_fingerprint_change<S: Store + Clone>(store: S) {
    let namespace = unique("fingerprint-upgrade");
    let calls = Arc::new(Calls::default());
    let (before, changed, reading) = apps(&store, &namespace, &calls);
    let order = r#"{"order_id":7,"amount":"9.90","client_sent_at":"10:00:00"}"#;

    // Answered before the deploy.
    let key = unique("K");
    let (status, _, first) = read(
        before
            .clone()
            .oneshot(post_with_key("/orders", Some(&key), order))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{first:?}");
    let (status, _, _) = read(
        changed
            .clone()
            .oneshot(post_with_key("/orders", Some(&key), order))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        status, 422,
        "without the previous fingerprint, the retry conflicts"
    );
    let (status, headers, again) = read(
        reading
            .clone()
            .oneshot(post_with_key("/orders", Some(&key), order))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{again:?}");
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(again, first);
    let storage_key =
        Scope::new(namespace.clone()).storage_key(&IdempotencyKey::parse(&key).unwrap());
    let record = store.get(&storage_key).await.unwrap().unwrap();
    assert_eq!(record.conflicts, 1, "only the refused retry marked it");
    // Another amount under the key: a conflict under both fingerprints.
    let (status, _, _) = read(
        reading
            .clone()
            .oneshot(post_with_key(
                "/orders",
                Some(&key),
                r#"{"order_id":7,"amount":"19.90","client_sent_at":"10:00:00"}"#,
            ))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 422);
    assert_eq!(calls.orders.load(Ordering::SeqCst), 1);

    // In flight across the deploy: the first still runs on an instance not yet upgraded.
    let key = unique("K");
    let running = tokio::spawn({
        let before = before.clone();
        let key = key.clone();
        async move {
            read(
                before
                    .oneshot(post_with_key("/held", Some(&key), order))
                    .await
                    .unwrap(),
            )
            .await
        }
    });
    calls.held_started.notified().await;
    let (status, _, _) = read(
        reading
            .clone()
            .oneshot(post_with_key("/held", Some(&key), order))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 409, "in flight, not a conflict");
    calls.held_release.notify_one();
    let (status, _, first) = running.await.unwrap();
    assert_eq!(status, 200);
    let (status, headers, again) = read(
        reading
            .oneshot(post_with_key("/held", Some(&key), order))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status.as_u16(), again), (200, first));
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(calls.held.load(Ordering::SeqCst), 1, "nothing ran twice");
}

#[tokio::test]
async fn retries_survive_a_fingerprint_change_on_redis() {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    match RedisStore::connect(&url).await {
        Ok(store) => {
            let store = store.with_key_prefix(format!("{}:", unique("test:tower:upgrade")));
            retries_survive_a_fingerprint_change(store).await;
        }
        Err(error) => unavailable::<()>("Redis", error).unwrap_or_default(),
    }
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn retries_survive_a_fingerprint_change_on_postgres() {
    common::on_postgres("idem_upgrade", retries_survive_a_fingerprint_change).await;
}
