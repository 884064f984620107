//! A benchmark reference, not an idempotency layer: the least that any layer replaying stored
//! responses must do for a new key, so that `bench/http-wrk.sh` (`REFERENCE=1`) can show how
//! much of the bare throughput such a layer can keep at all.
//!
//! For `POST /orders` it hashes the `Idempotency-Key` header to 64 bits, inserts it into one of
//! 64 locked maps, buffers the request body, runs the handler, buffers its answer and keeps the
//! status and body, copied into a per-shard arena (one allocation per 64 KiB, not one per
//! record). A known key replays its status and body; one still running answers 409. It has no
//! fingerprint, scope, lease, fencing, expiry, stored headers, metrics or disconnect handling,
//! and two keys with the same 64-bit hash collide: it measures, it does not protect.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::convert::Infallible;
use std::hash::{BuildHasher, RandomState};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use http::{Method, StatusCode};
use http_body_util::BodyExt;
use tower::ServiceExt;
use tower_service::Service;

const SHARDS: usize = 64;
const ARENA_CHUNK: usize = 64 * 1024;

/// What the reference keeps per key.
enum Kept {
    Running,
    Done(StatusCode, Bytes),
}

#[derive(Default)]
struct Shard {
    keys: HashMap<u64, Kept>,
    arena: BytesMut,
}

impl Shard {
    /// `body`, copied into the shard's arena.
    fn keep(&mut self, body: &[u8]) -> Bytes {
        if self.arena.capacity() - self.arena.len() < body.len() {
            self.arena = BytesMut::with_capacity(ARENA_CHUNK.max(body.len()));
        }
        self.arena.extend_from_slice(body);
        self.arena.split().freeze()
    }
}

struct Shared {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
}

/// [`Reference`] around a router: `POST /orders` goes through the reference, the rest straight
/// to the router.
#[derive(Clone)]
pub struct Reference {
    inner: Router,
    shared: Arc<Shared>,
}

impl Reference {
    /// The reference in front of `inner`.
    pub fn new(inner: Router) -> Self {
        let shards = (0..SHARDS).map(|_| Mutex::default()).collect();
        let hasher = RandomState::new();
        Self {
            inner,
            shared: Arc::new(Shared { shards, hasher }),
        }
    }
}

impl Service<Request> for Reference {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let inner = self.inner.clone();
        let shared = Arc::clone(&self.shared);
        Box::pin(async move {
            if request.method() != Method::POST || request.uri().path() != "/orders" {
                return inner.oneshot(request).await;
            }
            let Some(key) = request.headers().get("idempotency-key") else {
                return Ok(answer(StatusCode::BAD_REQUEST, Bytes::new()));
            };
            let hash = shared.hasher.hash_one(key.as_bytes());
            let shard = &shared.shards[(hash % SHARDS as u64) as usize];
            match lock(shard).keys.entry(hash) {
                Entry::Occupied(kept) => {
                    return Ok(match kept.get() {
                        Kept::Done(status, body) => answer(*status, body.clone()),
                        Kept::Running => answer(StatusCode::CONFLICT, Bytes::new()),
                    });
                }
                Entry::Vacant(slot) => {
                    slot.insert(Kept::Running);
                }
            }
            let (parts, body) = request.into_parts();
            let Ok(body) = body.collect().await.map(|body| body.to_bytes()) else {
                lock(shard).keys.remove(&hash);
                return Ok(answer(StatusCode::BAD_REQUEST, Bytes::new()));
            };
            let response = inner
                .oneshot(Request::from_parts(parts, Body::from(body)))
                .await?;
            let (parts, body) = response.into_parts();
            let Ok(body) = body.collect().await.map(|body| body.to_bytes()) else {
                lock(shard).keys.remove(&hash);
                return Ok(answer(StatusCode::INTERNAL_SERVER_ERROR, Bytes::new()));
            };
            let mut kept = lock(shard);
            let stored = kept.keep(&body);
            kept.keys.insert(hash, Kept::Done(parts.status, stored));
            drop(kept);
            Ok(Response::from_parts(parts, Body::from(body)))
        })
    }
}

fn lock(shard: &Mutex<Shard>) -> std::sync::MutexGuard<'_, Shard> {
    shard.lock().unwrap_or_else(PoisonError::into_inner)
}

fn answer(status: StatusCode, body: Bytes) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AppState, bare};

    fn order(key: &str, amount: u32) -> Request {
        Request::post("/orders")
            .header("content-type", "application/json")
            .header("idempotency-key", key)
            .body(Body::from(format!(
                r#"{{"user_id": 7, "amount_cents": {amount}}}"#
            )))
            .expect("request")
    }

    async fn text(response: Response) -> (StatusCode, String) {
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        (status, String::from_utf8(body.to_vec()).expect("utf-8"))
    }

    #[tokio::test]
    async fn a_known_key_replays_the_first_answer() {
        let service = Reference::new(bare(AppState::in_memory()));
        let first = text(
            service
                .clone()
                .oneshot(order("k1", 100))
                .await
                .expect("first"),
        )
        .await;
        let again = text(
            service
                .clone()
                .oneshot(order("k1", 100))
                .await
                .expect("again"),
        )
        .await;
        let other = text(service.oneshot(order("k2", 100)).await.expect("other")).await;
        assert_eq!(first.0, StatusCode::CREATED);
        assert_eq!(again, first);
        assert_ne!(other.1, first.1, "a new key runs the handler again");
    }

    #[tokio::test]
    async fn a_request_without_a_key_is_refused() {
        let service = Reference::new(bare(AppState::in_memory()));
        let mut request = order("k", 1);
        request.headers_mut().remove("idempotency-key");
        let response = service.oneshot(request).await.expect("response");
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    }
}
