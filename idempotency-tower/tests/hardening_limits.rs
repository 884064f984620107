//! Limits that hold, each tested at and just past its bound, through the layer (axum,
//! `oneshot`): request body size, key length, stored response body size, stored response
//! header count and bytes, memory-store capacity (a full store answers 503 and never evicts a
//! live record), and the number of concurrently running guarded handlers (tower's
//! `ConcurrencyLimit` + `LoadShed` in front of the layer: past the bound a request is shed with
//! 503 before anything is claimed).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::error_handling::HandleErrorLayer;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use axum::routing::post;
use axum::{BoxError, Router};
use bytes::Bytes;
use http_body_util::BodyExt;
use idempotency_core::{MAX_KEY_LEN, MemoryStore, Store};
use idempotency_tower::{IdempotencyLayer, IdempotencyLayerBuilder, ScopeChosen};
use tokio::sync::Semaphore;
use tower::{ServiceBuilder, ServiceExt};

#[derive(Default)]
struct Handler {
    runs: AtomicUsize,
}

/// Answers with `x-headers` extra headers (each `x-h-<i>: <x-value-len> bytes`) and a body of
/// `x-body` bytes, as asked by the request.
async fn respond(State(handler): State<Arc<Handler>>, headers: HeaderMap) -> Response<Body> {
    handler.runs.fetch_add(1, Ordering::SeqCst);
    let number = |name: &str| -> usize {
        headers
            .get(name)
            .map_or(0, |v| v.to_str().unwrap().parse().unwrap())
    };
    let mut response = Response::new(Body::from(vec![b'b'; number("x-body")]));
    let value = "v".repeat(number("x-value-len").max(1));
    for i in 0..number("x-headers") {
        response.headers_mut().insert(
            HeaderName::try_from(format!("x-h-{i:03}")).unwrap(),
            HeaderValue::from_str(&value).unwrap(),
        );
    }
    response
}

fn app<S: Store>(builder: IdempotencyLayerBuilder<S, ScopeChosen>) -> (Router, Arc<Handler>) {
    let handler = Arc::new(Handler::default());
    let router = Router::new()
        .route("/r", post(respond))
        .with_state(handler.clone())
        .layer(builder.build());
    (router, handler)
}

fn request(key: &str, asks: &[(&str, usize)], body: impl Into<Body>) -> Request<Body> {
    let mut builder = Request::post("/r").header("idempotency-key", key);
    for (name, value) in asks {
        builder = builder.header(*name, value.to_string());
    }
    builder.body(body.into()).unwrap()
}

async fn send(app: &Router, request: Request<Body>) -> (StatusCode, HeaderMap, Bytes) {
    let response = app.clone().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    (
        parts.status,
        parts.headers,
        body.collect().await.unwrap().to_bytes(),
    )
}

/// How many of the handler's `x-h-*` headers a response carries.
fn extra(headers: &HeaderMap) -> usize {
    headers
        .keys()
        .filter(|name| name.as_str().starts_with("x-h-"))
        .count()
}

fn replayed(headers: &HeaderMap) -> bool {
    headers.contains_key("idempotent-replayed")
}

#[tokio::test]
async fn request_body_at_the_limit_is_read_past_it_is_413() {
    let (app, handler) = app(IdempotencyLayer::builder(MemoryStore::new())
        .shared_scope()
        .max_body_bytes(1024));
    let (status, ..) = send(&app, request("at", &[], vec![b'x'; 1024])).await;
    assert_eq!(status, StatusCode::OK);

    let (status, headers, _) = send(&app, request("past", &[], vec![b'x'; 1025])).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(headers["content-type"], "application/problem+json");
    // Streamed in chunks without a length: counted as it arrives.
    let chunks = futures_stream(vec![vec![b'x'; 600], vec![b'x'; 425]]);
    let (status, ..) = send(&app, request("past-chunked", &[], chunks)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(handler.runs.load(Ordering::SeqCst), 1);

    // The refusal stored nothing: the same key with a body within the limit runs.
    let (status, headers, _) = send(&app, request("past", &[], vec![b'x'; 10])).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!replayed(&headers));
    assert_eq!(handler.runs.load(Ordering::SeqCst), 2);
}

/// A body streamed in `chunks`, with no length known in advance.
fn futures_stream(chunks: Vec<Vec<u8>>) -> Body {
    Body::new(Chunks(chunks.into_iter().map(Bytes::from).collect()))
}

struct Chunks(std::collections::VecDeque<Bytes>);

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = std::io::Error;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, std::io::Error>>> {
        std::task::Poll::Ready(
            self.0
                .pop_front()
                .map(|chunk| Ok(http_body::Frame::data(chunk))),
        )
    }
}

#[tokio::test]
async fn key_of_255_characters_is_accepted_256_is_400() {
    let (app, handler) = app(IdempotencyLayer::builder(MemoryStore::new()).shared_scope());
    let at = "k".repeat(MAX_KEY_LEN);
    let (status, ..) = send(&app, request(&at, &[], "")).await;
    assert_eq!(status, StatusCode::OK);
    let quoted = format!("\"{}\"", "q".repeat(MAX_KEY_LEN));
    let (status, ..) = send(&app, request(&quoted, &[], "")).await;
    assert_eq!(status, StatusCode::OK);

    let past = "k".repeat(MAX_KEY_LEN + 1);
    let (status, headers, _) = send(&app, request(&past, &[], "")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(headers["content-type"], "application/problem+json");
    let quoted = format!("\"{}\"", "q".repeat(MAX_KEY_LEN + 1));
    let (status, ..) = send(&app, request(&quoted, &[], "")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(handler.runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn stored_response_body_at_the_limit_is_stored_past_it_is_not() {
    let (app, handler) = app(IdempotencyLayer::builder(MemoryStore::new())
        .shared_scope()
        .max_stored_response_bytes(100));
    let at = [("x-body", 100)];
    let (status, _, body) = send(&app, request("at", &at, "")).await;
    assert_eq!((status, body.len()), (StatusCode::OK, 100));
    let (_, headers, body) = send(&app, request("at", &at, "")).await;
    assert!(replayed(&headers));
    assert_eq!(body.len(), 100);
    assert_eq!(handler.runs.load(Ordering::SeqCst), 1);

    // Past the limit the client still gets the whole body; the key stays taken and a retry is
    // told the work was done (409, not run again).
    let past = [("x-body", 101)];
    let (status, headers, body) = send(&app, request("past", &past, "")).await;
    assert_eq!((status, body.len()), (StatusCode::OK, 101));
    assert!(!replayed(&headers));
    assert_not_replayable(&app, request("past", &past, "")).await;
    assert_eq!(handler.runs.load(Ordering::SeqCst), 2);
}

/// A retry of work whose response was too large to store: 409 problem+json, replayed, and the
/// handler not run again.
async fn assert_not_replayable(app: &Router, retry: Request<Body>) {
    let (status, headers, body) = send(app, retry).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(replayed(&headers));
    assert_eq!(headers["content-type"], "application/problem+json");
    let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(problem["title"], "Response not replayable");
}

#[tokio::test]
async fn stored_response_header_count_at_the_bound_is_stored_past_it_is_not() {
    let (app, handler) = app(IdempotencyLayer::builder(MemoryStore::new())
        .shared_scope()
        .max_stored_headers(10, 64 * 1024));
    let (_, headers, _) = send(&app, request("at", &[("x-headers", 10)], "")).await;
    assert_eq!(extra(&headers), 10);
    let (_, headers, _) = send(&app, request("at", &[("x-headers", 10)], "")).await;
    assert!(replayed(&headers));
    assert_eq!(extra(&headers), 10, "the ten stored headers are replayed");
    assert_eq!(handler.runs.load(Ordering::SeqCst), 1);

    let (status, headers, _) = send(&app, request("past", &[("x-headers", 11)], "")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(extra(&headers), 11, "the client still gets every header");
    assert!(!replayed(&headers));
    assert_not_replayable(&app, request("past", &[("x-headers", 11)], "")).await;
    assert_eq!(handler.runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn default_header_bound_is_100_fields() {
    let (app, handler) = app(IdempotencyLayer::builder(MemoryStore::new()).shared_scope());
    assert_eq!(idempotency_tower::DEFAULT_MAX_STORED_HEADERS, 100);
    send(&app, request("at", &[("x-headers", 100)], "")).await;
    let (_, headers, _) = send(&app, request("at", &[("x-headers", 100)], "")).await;
    assert!(replayed(&headers));
    send(&app, request("past", &[("x-headers", 101)], "")).await;
    assert_not_replayable(&app, request("past", &[("x-headers", 101)], "")).await;
    assert_eq!(handler.runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn stored_response_header_bytes_at_the_bound_are_stored_past_it_are_not() {
    // 4 headers `x-h-00i` (7 bytes) with 93-byte values: exactly 400 bytes.
    let (app, handler) = app(IdempotencyLayer::builder(MemoryStore::new())
        .shared_scope()
        .max_stored_headers(100, 400));
    let at = [("x-headers", 4), ("x-value-len", 93)];
    send(&app, request("at", &at, "")).await;
    let (_, headers, _) = send(&app, request("at", &at, "")).await;
    assert!(replayed(&headers));
    let past = [("x-headers", 4), ("x-value-len", 94)];
    send(&app, request("past", &past, "")).await;
    assert_not_replayable(&app, request("past", &past, "")).await;
    assert_eq!(handler.runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn full_memory_store_answers_503_and_never_evicts_live_records() {
    let store = MemoryStore::with_capacity(8);
    let (app, handler) = app(IdempotencyLayer::builder(store)
        .shared_scope()
        .ttl(Duration::from_secs(3600)));
    for i in 0..8 {
        let (status, ..) = send(&app, request(&format!("live-{i}"), &[], "")).await;
        assert_eq!(status, StatusCode::OK);
    }
    for attempt in 0..3 {
        let (status, headers, _) = send(&app, request(&format!("new-{attempt}"), &[], "")).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(headers.contains_key("retry-after"));
    }
    assert_eq!(handler.runs.load(Ordering::SeqCst), 8);
    // Every live record is still there: each key replays, none runs again.
    for i in 0..8 {
        let (status, headers, _) = send(&app, request(&format!("live-{i}"), &[], "")).await;
        assert_eq!(status, StatusCode::OK);
        assert!(replayed(&headers), "live-{i} was evicted");
    }
    assert_eq!(handler.runs.load(Ordering::SeqCst), 8);
}

struct Held {
    started: AtomicUsize,
    gate: Semaphore,
}

/// Holds every handler until the test lets it go.
async fn held(State(held): State<Arc<Held>>) -> &'static str {
    held.started.fetch_add(1, Ordering::SeqCst);
    held.gate.acquire().await.unwrap().forget();
    "done"
}

#[tokio::test]
async fn running_handlers_are_bounded_by_a_concurrency_limit_in_front() {
    const BOUND: usize = 4;
    let state = Arc::new(Held {
        started: AtomicUsize::new(0),
        gate: Semaphore::new(0),
    });
    let guarded = Router::new()
        .route("/r", post(held))
        .with_state(state.clone())
        .layer(
            IdempotencyLayer::builder(MemoryStore::new())
                .shared_scope()
                .build(),
        );
    let app = Router::new().fallback_service(guarded).layer(
        ServiceBuilder::new()
            .layer(HandleErrorLayer::new(|_: BoxError| async {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    [("retry-after", "1")],
                    "overloaded",
                )
            }))
            .load_shed()
            .concurrency_limit(BOUND),
    );

    let mut running = Vec::new();
    for i in 0..BOUND {
        let app = app.clone();
        running.push(tokio::spawn(async move {
            send(&app, request(&format!("run-{i}"), &[], "")).await
        }));
    }
    // Wait (bounded) until BOUND handlers run, each holding a permit of the limit.
    for _ in 0..400 {
        if state.started.load(Ordering::SeqCst) == BOUND {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(state.started.load(Ordering::SeqCst), BOUND);
    // At the bound: the next request is shed with 503, before the store is touched.
    let (status, headers, _) = send(&app, request("shed", &[], "")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(headers.contains_key("retry-after"));
    assert_eq!(state.started.load(Ordering::SeqCst), BOUND);

    state.gate.add_permits(BOUND);
    for task in running {
        let (status, _, body) = task.await.unwrap();
        assert_eq!((status, &body[..]), (StatusCode::OK, &b"done"[..]));
    }
    // The shed request claimed nothing: now under the bound, its key runs.
    state.gate.add_permits(1);
    let (status, headers, _) = send(&app, request("shed", &[], "")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!replayed(&headers));
}
