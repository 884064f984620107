//! The middleware around plain tower services: errors, panics, bodies left unread.
#![allow(clippy::unwrap_used)]

mod common;

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full};
use idempotency_core::{CompleteRequest, MemoryStore, TouchRequest};
use idempotency_tower::{IdempotencyLayer, RequestBody};
use tower::{Layer, ServiceExt, service_fn};

/// A request body that fails as soon as anyone reads it.
struct Unreadable;

impl Body for Unreadable {
    type Data = Bytes;
    type Error = std::io::Error;
    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        Poll::Ready(Some(Err(std::io::Error::other("read"))))
    }
}

fn ok() -> Response<Full<Bytes>> {
    Response::new(Full::new(Bytes::from_static(b"done")))
}

#[tokio::test]
async fn service_errors_release_the_key() {
    let runs = Arc::new(AtomicUsize::new(0));
    let service = {
        let runs = Arc::clone(&runs);
        service_fn(move |_: Request<RequestBody<Full<Bytes>>>| {
            let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                if run == 1 {
                    Err("connection to the database lost")
                } else {
                    Ok(ok())
                }
            }
        })
    };
    let service = IdempotencyLayer::builder(MemoryStore::new())
        .shared_scope()
        .build()
        .layer(service);
    let request = || {
        Request::post("/pay")
            .header("idempotency-key", "k")
            .body(Full::new(Bytes::from_static(b"{}")))
            .unwrap()
    };
    let error = service.clone().oneshot(request()).await.unwrap_err();
    assert_eq!(error, "connection to the database lost");
    let response = service.clone().oneshot(request()).await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(!response.headers().contains_key("idempotent-replayed"));
    let replay = service.oneshot(request()).await.unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_panicking_handler_releases_the_key() {
    let runs = Arc::new(AtomicUsize::new(0));
    let service = {
        let runs = Arc::clone(&runs);
        service_fn(move |_: Request<RequestBody<Full<Bytes>>>| {
            let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                assert!(run > 1, "handler bug on the first run");
                Ok::<_, Infallible>(ok())
            }
        })
    };
    let service = IdempotencyLayer::builder(MemoryStore::new())
        .shared_scope()
        .wait_in_flight(Duration::from_secs(10))
        .build()
        .layer(service);
    let request = || {
        Request::post("/pay")
            .header("idempotency-key", "k")
            .body(Full::new(Bytes::from_static(b"{}")))
            .unwrap()
    };
    let panicked = tokio::spawn(service.clone().oneshot(request())).await;
    assert!(
        panicked.unwrap_err().is_panic(),
        "the panic reaches the caller"
    );
    let response = service.oneshot(request()).await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(!response.headers().contains_key("idempotent-replayed"));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn bodies_are_not_read_when_the_layer_does_not_need_them() {
    let service = service_fn(|request: Request<RequestBody<Unreadable>>| async move {
        // The handler decides not to read the body either.
        let _ = request;
        Ok::<_, Infallible>(ok())
    });
    let optional = IdempotencyLayer::builder(MemoryStore::new())
        .shared_scope()
        .require_key(false)
        .build()
        .layer(service);
    // Optional key, missing: passed through without reading the body.
    let response = optional
        .clone()
        .oneshot(Request::post("/pay").body(Unreadable).unwrap())
        .await
        .unwrap();
    assert_eq!(
        response.into_body().collect().await.unwrap().to_bytes(),
        "done"
    );
    // A method that passes through: the body is not read either.
    let response = optional
        .clone()
        .oneshot(
            Request::put("/pay")
                .header("idempotency-key", "k")
                .body(Unreadable)
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // With a key the body is read for the fingerprint, and its failure is a 400.
    let response = optional
        .oneshot(
            Request::post("/pay")
                .header("idempotency-key", "k")
                .body(Unreadable)
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
}

#[tokio::test]
async fn header_fingerprints_leave_the_body_streaming() {
    let runs = Arc::new(AtomicUsize::new(0));
    let service = {
        let runs = Arc::clone(&runs);
        service_fn(move |_: Request<RequestBody<Unreadable>>| {
            runs.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, Infallible>(ok()) }
        })
    };
    let service = IdempotencyLayer::builder(MemoryStore::new())
        .shared_scope()
        .fingerprint_headers([http::HeaderName::from_static("x-amount")])
        .build()
        .layer(service);
    let request = |amount: &'static str| {
        Request::post("/pay")
            .header("idempotency-key", "k")
            .header("x-amount", amount)
            .body(Unreadable)
            .unwrap()
    };
    assert_eq!(
        service
            .clone()
            .oneshot(request("10"))
            .await
            .unwrap()
            .status(),
        200
    );
    let replay = service.clone().oneshot(request("10")).await.unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(service.oneshot(request("11")).await.unwrap().status(), 422);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// A memory store whose first claim is applied, then held until the test lets it answer: the
/// window in which a client may go away after the key was taken but before the layer knew it.
#[derive(Default)]
struct HeldClaim {
    inner: idempotency_core::MemoryStore,
    claimed: tokio::sync::Notify,
    answer: tokio::sync::Notify,
    held_once: std::sync::atomic::AtomicBool,
}

impl idempotency_core::Store for HeldClaim {
    async fn claim(
        &self,
        request: idempotency_core::ClaimRequest<'_>,
    ) -> Result<idempotency_core::Claim, idempotency_core::StoreError> {
        let claim = self.inner.claim(request).await;
        if !self.held_once.swap(true, Ordering::SeqCst) {
            self.claimed.notify_one();
            self.answer.notified().await;
        }
        claim
    }
    async fn complete(
        &self,
        request: CompleteRequest<'_>,
    ) -> Result<(), idempotency_core::StoreError> {
        self.inner.complete(request).await
    }
    async fn release(
        &self,
        key: &idempotency_core::StorageKey,
        token: idempotency_core::FencingToken,
    ) -> Result<(), idempotency_core::StoreError> {
        self.inner.release(key, token).await
    }
    async fn undo_claim(
        &self,
        key: &idempotency_core::StorageKey,
        claim_id: idempotency_core::ClaimId,
    ) -> Result<bool, idempotency_core::StoreError> {
        self.inner.undo_claim(key, claim_id).await
    }
    async fn touch(&self, request: TouchRequest<'_>) -> Result<(), idempotency_core::StoreError> {
        self.inner.touch(request).await
    }
    async fn get(
        &self,
        key: &idempotency_core::StorageKey,
    ) -> Result<Option<idempotency_core::Record>, idempotency_core::StoreError> {
        self.inner.get(key).await
    }
    async fn purge_expired(&self, limit: usize) -> Result<u64, idempotency_core::StoreError> {
        self.inner.purge_expired(limit).await
    }
}

#[tokio::test]
async fn a_client_gone_during_the_claim_does_not_strand_the_key() {
    let runs = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(tokio::sync::Notify::new());
    let service = {
        let (runs, finished) = (Arc::clone(&runs), Arc::clone(&finished));
        service_fn(move |_: Request<RequestBody<Full<Bytes>>>| {
            runs.fetch_add(1, Ordering::SeqCst);
            let finished = Arc::clone(&finished);
            async move {
                finished.notify_one();
                Ok::<_, Infallible>(ok())
            }
        })
    };
    let store = Arc::new(HeldClaim::default());
    let service = IdempotencyLayer::builder(Arc::clone(&store))
        .shared_scope()
        .wait_in_flight(Duration::from_secs(10))
        .build()
        .layer(service);
    let request = || {
        Request::post("/pay")
            .header("idempotency-key", "k")
            .body(Full::new(Bytes::from_static(b"{}")))
            .unwrap()
    };
    let client = tokio::spawn(service.clone().oneshot(request()));
    store.claimed.notified().await;
    // The client goes away while its claim is in the store but unanswered.
    client.abort();
    assert!(client.await.unwrap_err().is_cancelled());
    store.answer.notify_one();
    // The claim finishes in the background and its key is released, not left in flight: the
    // retry runs the handler (it never ran for the client that left), then is replayed.
    let retry = service.clone().oneshot(request()).await.unwrap();
    assert_eq!(retry.status(), 200);
    assert!(!retry.headers().contains_key("idempotent-replayed"));
    finished.notified().await;
    let again = service.oneshot(request()).await.unwrap();
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// A response body that sends one chunk, then fails.
struct BreaksAfterOneChunk(bool);

impl Body for BreaksAfterOneChunk {
    type Data = Bytes;
    type Error = std::io::Error;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        if std::mem::replace(&mut self.0, true) {
            Poll::Ready(Some(Err(std::io::Error::other("upstream reset"))))
        } else {
            Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"partial")))))
        }
    }
}

#[tokio::test]
async fn a_failing_response_body_reaches_the_client_and_releases_the_key() {
    let runs = Arc::new(AtomicUsize::new(0));
    let service = {
        let runs = Arc::clone(&runs);
        service_fn(move |_: Request<RequestBody<Full<Bytes>>>| {
            runs.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, Infallible>(Response::new(BreaksAfterOneChunk(false))) }
        })
    };
    let service = IdempotencyLayer::builder(MemoryStore::new())
        .shared_scope()
        .build()
        .layer(service);
    let request = || {
        Request::post("/pay")
            .header("idempotency-key", "k")
            .body(Full::new(Bytes::from_static(b"{}")))
            .unwrap()
    };
    for _ in 0..2 {
        let response = service.clone().oneshot(request()).await.unwrap();
        let mut body = response.into_body();
        let first = body.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap(), "partial");
        let error = body.frame().await.unwrap().unwrap_err();
        assert_eq!(error.to_string(), "upstream reset");
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "not stored: the retry ran again"
    );
}

#[tokio::test]
async fn a_stale_owner_cannot_overwrite_the_new_owners_answer() {
    // No keep-alive and a short lease: a stalled first owner loses its key to a retry, and its
    // late answer is refused by the fencing token instead of replacing the retry's answer.
    let runs = Arc::new(AtomicUsize::new(0));
    let first_started = Arc::new(tokio::sync::Notify::new());
    let first_release = Arc::new(tokio::sync::Notify::new());
    let service = {
        let runs = Arc::clone(&runs);
        let (started, release) = (Arc::clone(&first_started), Arc::clone(&first_release));
        service_fn(move |_: Request<RequestBody<Full<Bytes>>>| {
            let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
            let (started, release) = (Arc::clone(&started), Arc::clone(&release));
            async move {
                if run == 1 {
                    started.notify_one();
                    release.notified().await;
                }
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(format!("run {run}")))))
            }
        })
    };
    let service = IdempotencyLayer::builder(MemoryStore::new())
        .shared_scope()
        .lease(Duration::from_millis(100))
        .keep_alive(false, Duration::ZERO)
        .build()
        .layer(service);
    let request = || {
        Request::post("/pay")
            .header("idempotency-key", "k")
            .body(Full::new(Bytes::from_static(b"{}")))
            .unwrap()
    };
    let stalled = tokio::spawn(service.clone().oneshot(request()));
    first_started.notified().await;
    tokio::time::sleep(Duration::from_millis(250)).await;
    let takeover = service.clone().oneshot(request()).await.unwrap();
    assert!(!takeover.headers().contains_key("idempotent-replayed"));
    assert_eq!(
        takeover.into_body().collect().await.unwrap().to_bytes(),
        "run 2"
    );
    first_release.notify_one();
    let late = stalled.await.unwrap().unwrap();
    assert_eq!(
        late.into_body().collect().await.unwrap().to_bytes(),
        "run 1"
    );
    let replay = service.oneshot(request()).await.unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(
        replay.into_body().collect().await.unwrap().to_bytes(),
        "run 2"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}
