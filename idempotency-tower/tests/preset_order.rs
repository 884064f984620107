//! Presets keep settings made before them, through real requests: `.namespace("x").grpc()`
//! stores under `x`, `.in_flight(Reject).callback(..)` answers a duplicate in flight 409 at
//! once, `.storage_policy(Standard).callback(..)` stores a 404.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Body;
use common::{Calls, read, routes, unique};
use idempotency_core::{
    Claim, ClaimId, ClaimRequest, CompleteRequest, FencingToken, InFlightPolicy, MemoryStore,
    Record, StorageKey, Store, StoreError, TouchRequest,
};
use idempotency_tower::{IdempotencyLayer, StoragePolicy};
use tower::ServiceExt;

fn callback(uri: &str, trade_no: &str) -> http::Request<Body> {
    http::Request::post(uri)
        .header("content-type", "application/json")
        .body(Body::from(format!(r#"{{"trade_no":"{trade_no}"}}"#)))
        .unwrap()
}

/// The memory store, counting the claims it is asked for: a duplicate rejected at once costs
/// one claim, a duplicate that waits claims again when it stops waiting.
#[derive(Default)]
struct CountingClaims {
    inner: MemoryStore,
    claims: AtomicUsize,
}

impl Store for CountingClaims {
    async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        self.claims.fetch_add(1, Ordering::SeqCst);
        self.inner.claim(request).await
    }
    async fn complete(&self, request: CompleteRequest<'_>) -> Result<(), StoreError> {
        self.inner.complete(request).await
    }
    async fn release(&self, key: &StorageKey, token: FencingToken) -> Result<(), StoreError> {
        self.inner.release(key, token).await
    }
    async fn undo_claim(&self, key: &StorageKey, claim_id: ClaimId) -> Result<bool, StoreError> {
        self.inner.undo_claim(key, claim_id).await
    }
    async fn touch(&self, request: TouchRequest<'_>) -> Result<(), StoreError> {
        self.inner.touch(request).await
    }
    async fn get(&self, key: &StorageKey) -> Result<Option<Record>, StoreError> {
        self.inner.get(key).await
    }
    async fn purge_expired(&self, limit: usize) -> Result<u64, StoreError> {
        self.inner.purge_expired(limit).await
    }
}

#[tokio::test]
async fn an_in_flight_policy_set_before_the_callback_preset_is_kept() {
    let calls = Arc::new(Calls::default());
    let store = Arc::new(CountingClaims::default());
    let app = routes(Arc::clone(&calls)).layer(
        IdempotencyLayer::builder(Arc::clone(&store))
            .in_flight(InFlightPolicy::Reject)
            .callback("/trade_no")
            .shared_scope()
            .build(),
    );
    let trade = unique("T");
    let first = tokio::spawn(app.clone().oneshot(callback("/held", &trade)));
    calls.held_started.notified().await;
    let (status, headers, _) = read(
        app.clone()
            .oneshot(callback("/held", &trade))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 409);
    assert!(headers.contains_key("retry-after"));
    assert_eq!(
        store.claims.load(Ordering::SeqCst),
        2,
        "the duplicate was rejected at its first claim, not made to wait"
    );
    calls.held_release.notify_one();
    assert_eq!(read(first.await.unwrap().unwrap()).await.0, 200);
}

#[tokio::test]
async fn a_storage_policy_set_before_the_callback_preset_is_kept() {
    let calls = Arc::new(Calls::default());
    let app = routes(Arc::clone(&calls)).layer(
        IdempotencyLayer::builder(MemoryStore::new())
            .storage_policy(StoragePolicy::Standard)
            .callback("/trade_no")
            .shared_scope()
            .build(),
    );
    let trade = unique("T");
    for _ in 0..2 {
        let (status, _, _) = read(
            app.clone()
                .oneshot(callback("/status?code=404", &trade))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 404);
    }
    assert_eq!(calls.status.load(Ordering::SeqCst), 1, "the 404 was stored");
}

#[cfg(feature = "grpc")]
mod grpc {
    use super::*;
    use axum::Router;
    use axum::routing::post;
    use idempotency_core::{IdempotencyKey, Scope};

    #[tokio::test]
    async fn a_namespace_set_before_the_grpc_preset_is_kept() {
        let store = Arc::new(MemoryStore::new());
        let app = Router::new()
            .route("/pay.v1.Pay/Pay", post(|| async { [("grpc-status", "0")] }))
            .layer(
                IdempotencyLayer::builder(Arc::clone(&store))
                    .namespace("payments.grpc")
                    .grpc()
                    .shared_scope()
                    .build(),
            );
        let key = unique("k");
        let request = http::Request::post("/pay.v1.Pay/Pay")
            .header("content-type", "application/grpc")
            .header("idempotency-key", &key)
            .body(Body::from(vec![0, 0, 0, 0, 0]))
            .unwrap();
        let (_, headers, _) = read(app.oneshot(request).await.unwrap()).await;
        assert_eq!(headers["grpc-status"], "0");
        let key = IdempotencyKey::parse(&key).unwrap();
        let kept = store
            .get(&Scope::new("payments.grpc").storage_key(&key))
            .await
            .unwrap();
        assert!(kept.is_some(), "stored under the namespace given first");
        let preset = store
            .get(&Scope::new("grpc").storage_key(&key))
            .await
            .unwrap();
        assert!(preset.is_none(), "not under the preset's namespace");
    }
}
