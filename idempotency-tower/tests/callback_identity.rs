//! A notification's identity in the callback preset ([`Callback`]): its key is the trade plus
//! its status, its fingerprint the named business fields. On the memory store and Redis
//! (`REDIS_URL`, default `redis://127.0.0.1:6379`), through a real axum router.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Body;
use axum::routing::post;
use bytes::Bytes;
use common::{problem, read, unique};
use idempotency_core::{Mechanism, MemoryStore, Scope, Store};
use idempotency_redis::RedisStore;
use idempotency_test::unavailable;
use idempotency_tower::{Callback, ConflictAnswer, IdempotencyLayer};
use tower::ServiceExt;

/// The merchant's handler: counts its runs, answers `success n`.
fn notify_app<S: Store>(layer: IdempotencyLayer<S>, runs: Arc<AtomicUsize>) -> Router {
    Router::new()
        .route(
            "/notify",
            post(move |_body: Bytes| {
                let runs = Arc::clone(&runs);
                async move { format!("success {}", runs.fetch_add(1, Ordering::SeqCst) + 1) }
            }),
        )
        .layer(layer)
}

fn notice(trade: &str, status: &str, amount: &str, sign: &str) -> http::Request<Body> {
    http::Request::post("/notify")
        .header("content-type", "application/json")
        .body(Body::from(format!(
            r#"{{"out_trade_no":"{trade}","trade_status":"{status}","total_amount":"{amount}","sign":"{sign}","gmt_payment":"{sign}"}}"#
        )))
        .unwrap()
}

fn alipay() -> Callback {
    Callback::key("/out_trade_no")
        .status("/trade_status")
        .fields(["/total_amount"])
}

async fn statuses_are_notifications_of_their_own<S: Store + Clone>(store: S) {
    let namespace = unique("callbacks.identity");
    let runs = Arc::new(AtomicUsize::new(0));
    let app = notify_app(
        IdempotencyLayer::builder(store.clone())
            .namespace(namespace.clone())
            .callback(alipay())
            .shared_scope()
            .build(),
        Arc::clone(&runs),
    );
    let trade = unique("T");
    let send = |request| app.clone().oneshot(request);

    let (_, _, paid) = read(
        send(notice(&trade, "TRADE_SUCCESS", "9.90", "s1"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(paid, "success 1");
    // Re-signed: fields outside the fingerprint changed; a duplicate.
    let (status, headers, again) = read(
        send(notice(&trade, "TRADE_SUCCESS", "9.90", "s2"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status.as_u16(), &again), (200, &paid));
    assert_eq!(headers["idempotent-replayed"], "true");
    // Another status of the same trade is a notification of its own: it runs.
    let (status, headers, finished) = read(
        send(notice(&trade, "TRADE_FINISHED", "9.90", "s3"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status.as_u16(), &finished[..]), (200, &b"success 2"[..]));
    assert!(!headers.contains_key("idempotent-replayed"));
    // A conflicting payment notice (another amount) gets the stored success of its own status.
    let (status, headers, conflict) = read(
        send(notice(&trade, "TRADE_SUCCESS", "19.90", "s4"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status.as_u16(), &conflict), (200, &paid));
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(runs.load(Ordering::SeqCst), 2);

    // Operators find the record by the raw key "<trade> <status>" (`idempotency inspect --key`).
    let scope = Scope::new(namespace);
    let raw = format!("{trade} TRADE_FINISHED");
    let record = scope.storage_key_for(Mechanism::Request, &raw);
    assert!(store.get(&record).await.unwrap().is_some());
}

#[tokio::test]
async fn statuses_are_notifications_of_their_own_on_the_memory_store() {
    statuses_are_notifications_of_their_own(Arc::new(MemoryStore::new())).await;
}

#[tokio::test]
async fn statuses_are_notifications_of_their_own_on_redis() {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    match RedisStore::connect(&url).await {
        Ok(store) => {
            let prefix = format!("{}:", unique("test:tower:identity"));
            statuses_are_notifications_of_their_own(Arc::new(store.with_key_prefix(prefix))).await;
        }
        Err(error) => unavailable::<()>("Redis", error).unwrap_or_default(),
    }
}

#[tokio::test]
async fn a_conflict_is_refused_when_configured() {
    let runs = Arc::new(AtomicUsize::new(0));
    let app = notify_app(
        IdempotencyLayer::builder(MemoryStore::new())
            .callback(alipay())
            .on_conflict(ConflictAnswer::Reject)
            .shared_scope()
            .build(),
        Arc::clone(&runs),
    );
    let trade = unique("T");
    let first = app
        .clone()
        .oneshot(notice(&trade, "TRADE_SUCCESS", "9.90", "s1"))
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    let conflict = app
        .clone()
        .oneshot(notice(&trade, "TRADE_SUCCESS", "19.90", "s2"))
        .await
        .unwrap();
    problem(conflict, 422).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_status_of_another_type_is_refused() {
    let app = notify_app(
        IdempotencyLayer::builder(MemoryStore::new())
            .callback(alipay())
            .shared_scope()
            .build(),
        Arc::new(AtomicUsize::new(0)),
    );
    let request = http::Request::post("/notify")
        .body(Body::from(
            r#"{"out_trade_no":"T1","trade_status":{"a":1}}"#,
        ))
        .unwrap();
    let body = problem(app.oneshot(request).await.unwrap(), 400).await;
    assert!(body["detail"].as_str().unwrap().contains("/trade_status"));
}
