//! Small holes of the layer, each closed: two key values joined into one header (`a1,a2`),
//! credential fields beyond the common four replayed, an undecodable stored response run
//! again under fail-open, JSON numbers whose digits a float would lose, a slow body pinning its
//! key; and a full memory store answers 503 rather than growing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::routing::post;
use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::BodyExt;
use idempotency_core::{
    ClaimId, ClaimRequest, CompleteRequest, Fingerprint, IdempotencyKey, MemoryStore, Outcome,
    Scope, Store,
};
use idempotency_tower::{IdempotencyLayer, IdempotencyLayerBuilder, ScopeChosen};
use tower::ServiceExt;

/// Credential fields a response may carry, each of which must not be replayed to another call.
const CREDENTIALS: [&str; 8] = [
    "authentication-info",
    "x-auth-token",
    "x-api-key",
    "x-csrf-token",
    "x-xsrf-token",
    "x-amz-security-token",
    "proxy-authenticate",
    "set-cookie2",
];

async fn handler(State(runs): State<Arc<AtomicUsize>>, _body: Bytes) -> Response<Body> {
    let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
    let mut response = Response::builder().status(StatusCode::CREATED);
    for name in CREDENTIALS {
        response = response.header(name, format!("s3cr3t-{name}"));
    }
    response
        .header("x-run", n)
        .body(Body::from(format!("run {n}")))
        .unwrap()
}

fn app(
    builder: IdempotencyLayerBuilder<Arc<MemoryStore>, ScopeChosen>,
) -> (Router, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let router = Router::new()
        .route("/pay", post(handler))
        .with_state(Arc::clone(&runs))
        .layer(builder.build());
    (router, runs)
}

async fn send(app: &Router, key: &str, body: &str) -> (StatusCode, HeaderMap, String) {
    let request = Request::post("/pay")
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

#[tokio::test]
async fn a_bare_key_with_a_comma_is_two_values_and_refused() {
    let store = Arc::new(MemoryStore::new());
    let (app, runs) = app(IdempotencyLayer::builder(store).shared_scope());
    let (status, headers, body) = send(&app, "a1,a2", "{}").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(headers["content-type"], "application/problem+json");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    // Quoted, a comma is part of one key.
    let (status, ..) = send(&app, "\"a1,a2\"", "{}").await;
    assert_eq!(status, StatusCode::CREATED);
}

#[tokio::test]
async fn credential_fields_are_never_replayed() {
    let store = Arc::new(MemoryStore::new());
    let (app, runs) = app(IdempotencyLayer::builder(Arc::clone(&store)).shared_scope());
    let (status, first, _) = send(&app, "k-cred", "{}").await;
    assert_eq!(status, StatusCode::CREATED);
    for name in CREDENTIALS {
        assert!(first.contains_key(name), "the first answer carries {name}");
    }
    let (_, replay, _) = send(&app, "k-cred", "{}").await;
    assert_eq!(replay["idempotent-replayed"], "true");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    for name in CREDENTIALS {
        assert!(!replay.contains_key(name), "{name} was replayed");
    }
    // Nor are they in the store.
    let key = Scope::new("http").storage_key(&IdempotencyKey::parse("k-cred").unwrap());
    let record = store.get(&key).await.unwrap().expect("stored");
    let stored = String::from_utf8_lossy(&record.outcome.unwrap().body).into_owned();
    assert!(!stored.contains("s3cr3t"), "{stored}");
}

#[tokio::test]
async fn an_undecodable_stored_response_is_never_run_again_even_failing_open() {
    let store = Arc::new(MemoryStore::new());
    let key = Scope::new("http").storage_key(&IdempotencyKey::parse("k-garbled").unwrap());
    let fingerprint = Fingerprint::of_request("POST", "/pay", b"{}");
    let claim = store
        .claim(ClaimRequest {
            key: &key,
            namespace: "http",
            fingerprint: &fingerprint,
            lease: std::time::Duration::from_secs(60),
            claim_id: ClaimId::random(),
            mechanism: None,
            key_derivation: None,
        })
        .await
        .unwrap();
    let idempotency_core::Claim::Acquired(lease) = claim else {
        panic!("a new key");
    };
    let garbled = Outcome::new(201, Bytes::from_static(b"not a stored response"));
    store
        .complete(CompleteRequest {
            key: &key,
            token: lease.token,
            outcome: &garbled,
            ttl: std::time::Duration::from_secs(60),
        })
        .await
        .unwrap();

    let (app, runs) = app(IdempotencyLayer::builder(store)
        .shared_scope()
        .fail_open(true));
    let (status, headers, body) = send(&app, "k-garbled", "{}").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(headers["content-type"], "application/problem+json");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the handler ran again");
}

/// Trade numbers beyond 64 bits, as a gateway might send them: exact digits or a refusal,
/// never two orders merged into one key or one fingerprint.
#[tokio::test]
async fn json_numbers_beyond_64_bits_are_refused_not_rounded() {
    let store = Arc::new(MemoryStore::new());
    let (keyed, runs) = app(IdempotencyLayer::builder(Arc::clone(&store))
        .shared_scope()
        .key_from_json("/trade_no"));
    let first = r#"{"trade_no":12345678901234567890123456789890}"#;
    let second = r#"{"trade_no":12345678901234567890123456789891}"#;
    for body in [first, second] {
        let request = Request::post("/pay").body(Body::from(body)).unwrap();
        let response = keyed.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{body}");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    // Within 64 bits, the integer is the key, exactly.
    let request = Request::post("/pay")
        .body(Body::from(r#"{"trade_no":18446744073709551615}"#))
        .unwrap();
    assert_eq!(keyed.clone().oneshot(request).await.unwrap().status(), 201);

    let (fingerprinted, runs) = app(IdempotencyLayer::builder(store)
        .namespace("by-fields")
        .shared_scope()
        .fingerprint_json_fields(["/order"]));
    let (status, _, body) = send(
        &fingerprinted,
        "k-fields",
        r#"{"order":{"id":12345678901234567890123456789890}}"#,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, ..) = send(&fingerprinted, "k-fields", r#"{"order":{"amount":10.5}}"#).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_full_memory_store_answers_503_and_still_replays_what_it_holds() {
    let store = Arc::new(MemoryStore::with_capacity(1));
    let (app, runs) = app(IdempotencyLayer::builder(store).shared_scope());
    let (status, ..) = send(&app, "k-held", "{}").await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, headers, body) = send(&app, "k-new", "{}").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(headers["content-type"], "application/problem+json");
    assert!(headers.contains_key("retry-after"));
    let (status, headers, _) = send(&app, "k-held", "{}").await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// A body that stops arriving: 408 after the read timeout, nothing claimed, so the complete
/// request with the same key then runs.
#[tokio::test]
async fn a_slow_body_is_refused_408_and_pins_no_key() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let store = Arc::new(MemoryStore::new());
    let (app, runs) = app(IdempotencyLayer::builder(Arc::clone(&store))
        .shared_scope()
        .key_from_json("/trade_no")
        .body_read_timeout(std::time::Duration::from_millis(200)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let body = r#"{"trade_no":"T-slow","amount":1}"#;
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /pay HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    slow.write_all(head.as_bytes()).await.unwrap();
    slow.write_all(&body.as_bytes()[..10]).await.unwrap();
    // The rest never comes; the answer does.
    let mut answer = vec![0u8; 1024];
    let read = slow.read(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer[..read]).into_owned();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("application/problem+json"), "{answer}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert!(store.is_empty(), "nothing was claimed");

    let mut whole = tokio::net::TcpStream::connect(addr).await.unwrap();
    whole.write_all(head.as_bytes()).await.unwrap();
    whole.write_all(body.as_bytes()).await.unwrap();
    let mut answer = vec![0u8; 1024];
    let read = whole.read(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer[..read]).into_owned();
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
