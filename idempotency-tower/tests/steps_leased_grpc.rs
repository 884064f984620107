//! The steps layer in gRPC mode (as tonic serves it) on a core store: on Redis (`REDIS_URL`,
//! default `redis://127.0.0.1:6379`) and the memory store, a call answered `UNAVAILABLE` after
//! its step's checkpoint leaves its run resumable, the retry resumes after the step without
//! calling it again, and the answer is then replayed with its trailers.
#![cfg(all(feature = "steps", feature = "grpc"))]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::{BodyExt, Full};
use idempotency_core::{MemoryStore, Store};
use idempotency_operations::Operations;
use idempotency_steps::leased::Leased;
use idempotency_tower::steps::Steps;
use idempotency_tower::{IdempotencyLayer, RequestBody};
use tower::{Layer, ServiceExt, service_fn};

/// The calls the capture step made, and whether the next call answers `UNAVAILABLE` after it.
#[derive(Default)]
struct World {
    captures: AtomicUsize,
    unavailable_once: AtomicBool,
    resumed: AtomicBool,
}

/// A gRPC message frame: uncompressed, its length, the message.
fn frame(message: &[u8]) -> Bytes {
    let mut framed = BytesMut::with_capacity(5 + message.len());
    framed.put_u8(0);
    framed.put_u32(u32::try_from(message.len()).unwrap());
    framed.put_slice(message);
    framed.freeze()
}

/// `Pay`, with its key in the metadata.
fn pay(key: &str) -> Request<Full<Bytes>> {
    Request::post("/payments.v1.Payments/Pay")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("idempotency-key", key)
        .body(Full::new(frame(b"pay 10")))
        .unwrap()
}

/// What a call answered: its `grpc-status`, body, trailers and whether it was a replay.
async fn answer<B>(response: Response<B>) -> (String, Bytes, Option<HeaderMap>, bool)
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    let (parts, body) = response.into_parts();
    let collected = body.collect().await.unwrap();
    let trailers = collected.trailers().cloned();
    let code = trailers
        .as_ref()
        .and_then(|trailers| trailers.get("grpc-status"))
        .or_else(|| parts.headers.get("grpc-status"))
        .map(|code| code.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let replayed = parts.headers.contains_key("idempotent-replayed");
    (code, collected.to_bytes(), trailers, replayed)
}

async fn unavailable_then_resumed<S: Store + Operations + Clone>(store: S) {
    let world = Arc::new(World::default());
    let layer = IdempotencyLayer::builder(store)
        .grpc()
        .shared_scope()
        .namespace(format!(
            "grpc-steps-{}",
            idempotency_test::unique_key().to_hex()
        ))
        .build_leased_steps();
    let handler_world = Arc::clone(&world);
    // The method: one foreign step (capture), then OK, or UNAVAILABLE once after the capture.
    let service = layer.layer(service_fn(
        move |request: Request<RequestBody<Full<Bytes>>>| {
            let world = Arc::clone(&handler_world);
            async move {
                let mut run: Steps<Leased<S>> =
                    Steps::from_extensions(request.extensions().get()).unwrap();
                let capture: String = run
                    .foreign("capture", async |key| {
                        world.captures.fetch_add(1, Ordering::SeqCst);
                        Ok(format!("captured with {}", &key[..8]))
                    })
                    .await
                    .unwrap();
                world.resumed.store(run.resumed(), Ordering::SeqCst);
                let code = match world.unavailable_once.swap(false, Ordering::SeqCst) {
                    true => "14",
                    false => "0",
                };
                let mut trailers = HeaderMap::new();
                trailers.insert("grpc-status", HeaderValue::from_static(code));
                let body = Full::new(frame(capture.as_bytes()))
                    .with_trailers(async move { Some(Ok(trailers)) })
                    .boxed_unsync();
                let response = Response::builder()
                    .header("content-type", "application/grpc")
                    .body(body)
                    .unwrap();
                Ok::<_, Infallible>(response)
            }
        },
    ));
    let key = format!("K-{}", idempotency_test::unique_key().to_hex());

    world.unavailable_once.store(true, Ordering::SeqCst);
    let (code, _, _, replayed) = answer(service.clone().oneshot(pay(&key)).await.unwrap()).await;
    assert_eq!((code.as_str(), replayed), ("14", false));
    assert_eq!(world.captures.load(Ordering::SeqCst), 1);

    // UNAVAILABLE is not stored: the retry resumes the run after capture's checkpoint.
    let (code, body, trailers, replayed) =
        answer(service.clone().oneshot(pay(&key)).await.unwrap()).await;
    assert_eq!((code.as_str(), replayed), ("0", false));
    assert!(world.resumed.load(Ordering::SeqCst), "the run was resumed");
    assert_eq!(world.captures.load(Ordering::SeqCst), 1, "capture ran once");

    let (code, replay, replay_trailers, replayed) =
        answer(service.clone().oneshot(pay(&key)).await.unwrap()).await;
    assert_eq!((code.as_str(), replayed), ("0", true));
    assert_eq!((replay, replay_trailers), (body, trailers));
    assert_eq!(world.captures.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory() {
    unavailable_then_resumed(Arc::new(MemoryStore::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis() {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let store = match idempotency_redis::RedisStore::connect(&url).await {
        Ok(store) => Some(store.with_key_prefix("test:steps-grpc:")),
        Err(error) => idempotency_test::unavailable("Redis", error),
    };
    if let Some(store) = store {
        unavailable_then_resumed(store).await;
    }
}
