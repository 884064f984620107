//! Refusals a retry can change are never stored, even when the guarded service itself
//! produces them (an auth middleware or a tonic interceptor inside the layer): HTTP 401 and
//! 403, gRPC `UNAUTHENTICATED` and `PERMISSION_DENIED`. The retry with fresh credentials runs.
//! On the memory store and Redis (`REDIS_URL`, default `redis://127.0.0.1:6379`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Body;
use axum::response::IntoResponse;
use axum::routing::post;
use common::{read, unique};
use http::StatusCode;
use idempotency_core::{MemoryStore, Store};
use idempotency_redis::RedisStore;
use idempotency_test::unavailable;
use idempotency_tower::IdempotencyLayer;
use tower::ServiceExt;

/// A handler behind an authentication check: refused until the request carries the token
/// `fresh`, as an auth middleware inside the layer would answer.
fn app(runs: Arc<AtomicUsize>, refusal: StatusCode) -> Router {
    Router::new().route(
        "/pay",
        post(move |headers: http::HeaderMap| {
            let runs = Arc::clone(&runs);
            async move {
                if headers.get("authorization").is_none_or(|t| t != "fresh") {
                    return (refusal, "refused").into_response();
                }
                runs.fetch_add(1, Ordering::SeqCst);
                (StatusCode::CREATED, "paid").into_response()
            }
        }),
    )
}

/// The same handler answering as a tonic interceptor does: a trailers-only gRPC status.
#[cfg(feature = "grpc")]
fn grpc_app(runs: Arc<AtomicUsize>, code: &'static str) -> Router {
    use axum::response::Response;

    Router::new().route(
        "/pay.v1.Pay/Pay",
        post(move |headers: http::HeaderMap| {
            let runs = Arc::clone(&runs);
            async move {
                let status = if headers.get("authorization").is_none_or(|t| t != "fresh") {
                    code
                } else {
                    runs.fetch_add(1, Ordering::SeqCst);
                    "0"
                };
                let mut response = Response::new(Body::empty());
                let headers = response.headers_mut();
                headers.insert("content-type", "application/grpc".parse().unwrap());
                headers.insert("grpc-status", status.parse().unwrap());
                response
            }
        }),
    )
}

fn request(uri: &str, key: &str, token: &str, grpc: bool) -> http::Request<Body> {
    let builder = http::Request::post(uri)
        .header("idempotency-key", key)
        .header("authorization", token);
    if grpc {
        builder
            .header("content-type", "application/grpc")
            .body(Body::from(vec![0, 0, 0, 0, 2, 8, 1]))
            .unwrap()
    } else {
        builder.body(Body::from("{}")).unwrap()
    }
}

async fn refusals_are_released<S: Store + Clone>(store: S) {
    for refusal in [StatusCode::UNAUTHORIZED, StatusCode::FORBIDDEN] {
        let runs = Arc::new(AtomicUsize::new(0));
        let layer = IdempotencyLayer::builder(store.clone())
            .namespace(unique("refusals"))
            .shared_scope()
            .build();
        let app = app(Arc::clone(&runs), refusal).layer(layer);
        let key = unique("k");
        let (status, _, _) = read(
            app.clone()
                .oneshot(request("/pay", &key, "expired", false))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, refusal);
        let (status, headers, _) = read(
            app.clone()
                .oneshot(request("/pay", &key, "fresh", false))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{refusal} was replayed");
        assert!(!headers.contains_key("idempotent-replayed"));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }
    #[cfg(feature = "grpc")]
    for (code, name) in [("16", "UNAUTHENTICATED"), ("7", "PERMISSION_DENIED")] {
        let runs = Arc::new(AtomicUsize::new(0));
        let layer = IdempotencyLayer::builder(store.clone())
            .grpc()
            .namespace(unique("refusals.grpc"))
            .shared_scope()
            .build();
        let app = grpc_app(Arc::clone(&runs), code).layer(layer);
        let key = unique("k");
        let (_, headers, _) = read(
            app.clone()
                .oneshot(request("/pay.v1.Pay/Pay", &key, "expired", true))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(headers["grpc-status"], code);
        let (_, headers, _) = read(
            app.clone()
                .oneshot(request("/pay.v1.Pay/Pay", &key, "fresh", true))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(headers["grpc-status"], "0", "{name} was replayed");
        assert!(!headers.contains_key("idempotent-replayed"));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }
}

#[tokio::test]
async fn auth_refusals_are_released_on_the_memory_store() {
    refusals_are_released(Arc::new(MemoryStore::new())).await;
}

#[tokio::test]
async fn auth_refusals_are_released_on_redis() {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    match RedisStore::connect(&url).await {
        Ok(store) => {
            let prefix = format!("{}:", unique("test:tower:refusals"));
            refusals_are_released(Arc::new(store.with_key_prefix(prefix))).await;
        }
        Err(error) => unavailable::<()>("Redis", error).unwrap_or_default(),
    }
}
