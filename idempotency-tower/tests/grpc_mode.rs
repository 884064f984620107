//! The gRPC preset on plain `http` types: keys from metadata, refusals as gRPC statuses,
//! replays with trailers, streaming and non-gRPC calls passed through. (The tonic end-to-end
//! tests live with the gRPC example.)
#![cfg(feature = "grpc")]
#![allow(clippy::unwrap_used)]

mod common;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use common::{Partitionable, unique};
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use idempotency_core::{BoxStore, IdempotencyKey, Scope, Store};
use idempotency_tower::{IdempotencyLayer, RequestBody};
use tower::{Layer, Service, ServiceExt, service_fn};

const PAY: &str = "/payments.v1.Payments/Pay";
const DECLINE: &str = "/payments.v1.Payments/Decline";
const FLAKY: &str = "/payments.v1.Payments/Flaky";
const SLOW: &str = "/payments.v1.Payments/Slow";
const WATCH: &str = "/payments.v1.Payments/Watch";

fn frame(message: &[u8]) -> Bytes {
    let mut framed = BytesMut::with_capacity(5 + message.len());
    framed.put_u8(0);
    framed.put_u32(message.len() as u32);
    framed.put_slice(message);
    framed.freeze()
}

/// Signalled when the slow method starts (only one test calls it).
static SLOW_STARTED: tokio::sync::Notify = tokio::sync::Notify::const_new();
/// Lets the slow method finish.
static SLOW_RELEASE: tokio::sync::Notify = tokio::sync::Notify::const_new();

type GrpcBody = UnsyncBoxBody<Bytes, Infallible>;

/// A gRPC server as tonic answers: HTTP 200, a framed message, `grpc-status` in the trailers.
fn server(
    calls: Arc<AtomicUsize>,
) -> impl Service<
    Request<RequestBody<Full<Bytes>>>,
    Response = Response<GrpcBody>,
    Error = Infallible,
    Future: Send,
> + Clone
+ Send
+ 'static {
    service_fn(move |request: Request<RequestBody<Full<Bytes>>>| {
        let calls = Arc::clone(&calls);
        async move {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            let path = request.uri().path().to_owned();
            let received = request.into_body().collect().await.unwrap().to_bytes();
            if path == SLOW {
                SLOW_STARTED.notify_one();
                SLOW_RELEASE.notified().await;
            }
            let (code, message) = match path.as_str() {
                DECLINE => ("9", "card declined"),
                FLAKY => ("14", "backend down"),
                _ => ("0", ""),
            };
            let mut trailers = HeaderMap::new();
            trailers.insert("grpc-status", HeaderValue::from_static(code));
            if !message.is_empty() {
                trailers.insert("grpc-message", HeaderValue::from_static(message));
            }
            let reply = frame(format!("call {n}: {} bytes", received.len()).as_bytes());
            let body = Full::new(reply)
                .with_trailers(async move { Some(Ok(trailers)) })
                .boxed_unsync();
            let response = Response::builder()
                .header("content-type", "application/grpc")
                .header("x-server", "payments")
                .body(body)
                .unwrap();
            Ok::<_, Infallible>(response)
        }
    })
}

fn call(path: &str, key: Option<&str>, message: &[u8]) -> Request<Full<Bytes>> {
    let mut request = Request::post(path)
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    request.body(Full::new(frame(message))).unwrap()
}

struct Answer {
    headers: HeaderMap,
    body: Bytes,
    trailers: Option<HeaderMap>,
}

impl Answer {
    /// `grpc-status` from the trailers, or from the headers of a trailers-only answer.
    fn code(&self) -> String {
        self.trailers
            .as_ref()
            .and_then(|t| t.get("grpc-status"))
            .or_else(|| self.headers.get("grpc-status"))
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned()
    }
}

async fn answer<B: http_body::Body<Data = Bytes>>(response: Response<B>) -> Answer
where
    B::Error: std::fmt::Debug,
{
    assert_eq!(response.status(), 200, "gRPC answers are HTTP 200");
    let (parts, body) = response.into_parts();
    let collected = body.collect().await.unwrap();
    Answer {
        headers: parts.headers,
        trailers: collected.trailers().cloned(),
        body: collected.to_bytes(),
    }
}

#[tokio::test]
async fn unary_call_is_replayed_with_metadata_and_trailers() {
    let calls = Arc::new(AtomicUsize::new(0));
    let store = Arc::new(idempotency_core::MemoryStore::new());
    let service = IdempotencyLayer::builder(Arc::clone(&store))
        .grpc()
        .shared_scope()
        .build()
        .layer(server(Arc::clone(&calls)));
    let key = unique("grpc");
    let first = answer(
        service
            .clone()
            .oneshot(call(PAY, Some(&key), b"pay 10"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(first.code(), "0");
    assert!(!first.headers.contains_key("idempotent-replayed"));

    let replay = answer(
        service
            .clone()
            .oneshot(call(PAY, Some(&key), b"pay 10"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(replay.headers["idempotent-replayed"], "true");
    assert_eq!(replay.headers["x-server"], "payments");
    assert_eq!(replay.headers["content-type"], "application/grpc");
    assert_eq!(replay.body, first.body);
    assert_eq!(replay.trailers, first.trailers);
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // The record keeps the gRPC code for reconciliation.
    let storage_key = Scope::new("grpc").storage_key(&IdempotencyKey::parse(&key).unwrap());
    let record = store.get(&storage_key).await.unwrap().unwrap();
    assert_eq!(record.outcome.unwrap().status, 0);
}

#[tokio::test]
async fn final_error_statuses_are_replayed_transient_ones_released() {
    let calls = Arc::new(AtomicUsize::new(0));
    let service = IdempotencyLayer::builder(idempotency_core::MemoryStore::new())
        .grpc()
        .shared_scope()
        .build()
        .layer(server(Arc::clone(&calls)));
    let key = unique("declined");
    let first = answer(
        service
            .clone()
            .oneshot(call(DECLINE, Some(&key), b"x"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(first.code(), "9");
    let replay = answer(
        service
            .clone()
            .oneshot(call(DECLINE, Some(&key), b"x"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(replay.headers["idempotent-replayed"], "true");
    assert_eq!(
        replay.trailers.as_ref().unwrap()["grpc-message"],
        "card declined"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    let key = unique("flaky");
    for _ in 0..2 {
        let flaky = answer(
            service
                .clone()
                .oneshot(call(FLAKY, Some(&key), b"x"))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(flaky.code(), "14");
        assert!(!flaky.headers.contains_key("idempotent-replayed"));
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "UNAVAILABLE released the key: the retry ran"
    );
}

#[tokio::test]
async fn refusals_are_grpc_statuses() {
    let calls = Arc::new(AtomicUsize::new(0));
    let service = IdempotencyLayer::builder(idempotency_core::MemoryStore::new())
        .grpc()
        .shared_scope()
        .build()
        .layer(server(Arc::clone(&calls)));

    let missing = answer(
        service
            .clone()
            .oneshot(call(PAY, None, b"x"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(missing.code(), "3", "INVALID_ARGUMENT");
    assert!(
        missing.body.is_empty() && missing.trailers.is_none(),
        "trailers-only"
    );
    assert!(
        missing.headers["grpc-message"]
            .to_str()
            .unwrap()
            .contains("idempotency-key")
    );

    let invalid = answer(
        service
            .clone()
            .oneshot(call(PAY, Some(""), b"x"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(invalid.code(), "3");

    let key = unique("busy");
    let first = tokio::spawn(service.clone().oneshot(call(SLOW, Some(&key), b"x")));
    SLOW_STARTED.notified().await;
    // A retry whose deadline is near is refused in time (the preset waits, but never past the
    // call's `grpc-timeout`), with a retry hint.
    let mut impatient = call(SLOW, Some(&key), b"x");
    impatient
        .headers_mut()
        .insert("grpc-timeout", HeaderValue::from_static("300m"));
    let started = std::time::Instant::now();
    let busy = answer(service.clone().oneshot(impatient).await.unwrap()).await;
    assert_eq!(busy.code(), "10", "ABORTED");
    assert!(
        busy.headers.contains_key("retry-after"),
        "ABORTED with a retry hint"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "refused at its deadline, not at the 5 s wait"
    );
    // A retry with time to wait waits for the first call and gets its answer.
    let waiting = tokio::spawn(service.clone().oneshot(call(SLOW, Some(&key), b"x")));
    tokio::time::sleep(Duration::from_millis(100)).await;
    SLOW_RELEASE.notify_one();
    let first = answer(first.await.unwrap().unwrap()).await;
    assert_eq!(first.code(), "0");
    let waited = answer(waiting.await.unwrap().unwrap()).await;
    assert_eq!(waited.code(), "0");
    assert_eq!(waited.headers["idempotent-replayed"], "true");
    assert_eq!(waited.body, first.body);

    let mismatch = answer(
        service
            .clone()
            .oneshot(call(SLOW, Some(&key), b"other"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(mismatch.code(), "9", "FAILED_PRECONDITION");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn store_down_is_unavailable() {
    let calls = Arc::new(AtomicUsize::new(0));
    let store = Arc::new(Partitionable::default());
    store.down.store(true, Ordering::SeqCst);
    let layer = IdempotencyLayer::builder(BoxStore::new(Arc::clone(&store)))
        .shared_scope()
        .grpc()
        .store_timeout(Duration::from_millis(30))
        .build();
    let service = layer.layer(server(Arc::clone(&calls)));
    let down = answer(service.oneshot(call(PAY, Some("k"), b"x")).await.unwrap()).await;
    assert_eq!(down.code(), "14", "UNAVAILABLE");
    assert!(down.headers.contains_key("retry-after"));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn streaming_and_non_grpc_calls_pass_through() {
    let calls = Arc::new(AtomicUsize::new(0));
    let store = Arc::new(idempotency_core::MemoryStore::new());
    let layer = IdempotencyLayer::builder(Arc::clone(&store))
        .shared_scope()
        .grpc()
        .only_paths([PAY])
        .build();
    let service = layer.layer(server(Arc::clone(&calls)));
    // A streaming method, not listed: untouched, with or without a key.
    for key in [None, Some("k"), Some("k")] {
        let watched = answer(
            service
                .clone()
                .oneshot(call(WATCH, key, b"x"))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(watched.code(), "0");
        assert!(!watched.headers.contains_key("idempotent-replayed"));
    }
    // Not gRPC: untouched too.
    let mut plain = call(PAY, None, b"x");
    plain
        .headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    answer(service.clone().oneshot(plain).await.unwrap()).await;
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    assert!(store.is_empty());
    // The listed unary method is guarded.
    let missing = answer(service.oneshot(call(PAY, None, b"x")).await.unwrap()).await;
    assert_eq!(missing.code(), "3");
}

#[tokio::test]
async fn client_streaming_requests_pass_through() {
    let calls = Arc::new(AtomicUsize::new(0));
    let store = Arc::new(idempotency_core::MemoryStore::new());
    let service = IdempotencyLayer::builder(Arc::clone(&store))
        .grpc()
        .shared_scope()
        .build()
        .layer(server(Arc::clone(&calls)));
    let mut two_messages = BytesMut::new();
    two_messages.extend_from_slice(&frame(b"first"));
    two_messages.extend_from_slice(&frame(b"second"));
    let request = || {
        Request::post(PAY)
            .header("content-type", "application/grpc")
            .header("idempotency-key", "k")
            .body(Full::new(two_messages.clone().freeze()))
            .unwrap()
    };
    for _ in 0..2 {
        let streamed = answer(service.clone().oneshot(request()).await.unwrap()).await;
        assert_eq!(streamed.code(), "0");
        assert!(!streamed.headers.contains_key("idempotent-replayed"));
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert!(store.is_empty());
    // gRPC-Web is not guarded either.
    let mut web = call(PAY, None, b"x");
    web.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("application/grpc-web"),
    );
    answer(service.oneshot(web).await.unwrap()).await;
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}
