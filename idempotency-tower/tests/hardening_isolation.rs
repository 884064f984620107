//! Isolation through the layer: two tenants sending the same key never see each other's
//! responses (nor a 422 for each other's payloads); credentials (`Set-Cookie`,
//! `Authorization`, `Cookie`, `WWW-Authenticate`) are never stored unless enabled, checked on
//! the replay and on the raw bytes in the store; stored keys are hashed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, Request, Response, StatusCode};
use axum::routing::post;
use bytes::Bytes;
use http_body_util::BodyExt;
use idempotency_core::{IdempotencyKey, MemoryStore, Scope, Store};
use idempotency_tower::{IdempotencyLayer, StoredResponse};
use tower::ServiceExt;

const TENANT: HeaderName = HeaderName::from_static("x-tenant-id");

/// Echoes the tenant and the body, numbered, with credentials in the response headers.
async fn handler(
    State(runs): State<Arc<AtomicUsize>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response<Body> {
    let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
    let tenant = headers
        .get(&TENANT)
        .map_or("none".to_owned(), |v| v.to_str().unwrap().to_owned());
    Response::builder()
        .status(StatusCode::CREATED)
        .header("set-cookie", "session=s3cr3t-cookie; HttpOnly")
        .header("authorization", "Bearer s3cr3t-token")
        .header("www-authenticate", "Basic realm=\"s3cr3t-realm\"")
        .header("x-run", n)
        .body(Body::from(format!(
            "run {n} for {tenant}: {}",
            String::from_utf8_lossy(&body)
        )))
        .unwrap()
}

fn tenant_app(store: Arc<MemoryStore>, store_sensitive: bool) -> (Router, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let layer = IdempotencyLayer::builder(store)
        .namespace("iso")
        .principal_header(TENANT)
        .store_sensitive_headers(store_sensitive)
        .build();
    let router = Router::new()
        .route("/pay", post(handler))
        .with_state(runs.clone())
        .layer(layer);
    (router, runs)
}

async fn send(
    app: &Router,
    tenant: Option<&str>,
    key: &str,
    body: &str,
) -> (StatusCode, HeaderMap, String) {
    let mut builder = Request::post("/pay").header("idempotency-key", key);
    if let Some(tenant) = tenant {
        builder = builder.header(&TENANT, tenant);
    }
    let response = app
        .clone()
        .oneshot(builder.body(Body::from(body.to_owned())).unwrap())
        .await
        .unwrap();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8(body.to_vec()).unwrap(),
    )
}

#[tokio::test]
async fn tenants_with_the_same_key_never_see_each_others_responses() {
    let (app, runs) = tenant_app(Arc::new(MemoryStore::new()), false);
    let (_, _, acme) = send(&app, Some("acme"), "order-1", "{\"amount\":10}").await;
    assert_eq!(acme, "run 1 for acme: {\"amount\":10}");
    // Same key, same body, other tenant: its own run, not acme's replay.
    let (status, headers, globex) = send(&app, Some("globex"), "order-1", "{\"amount\":10}").await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(!headers.contains_key("idempotent-replayed"));
    assert_eq!(globex, "run 2 for globex: {\"amount\":10}");
    // Same key, other body, third tenant: no 422 from another tenant's record.
    let (status, _, initech) = send(&app, Some("initech"), "order-1", "{\"amount\":99}").await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(initech, "run 3 for initech: {\"amount\":99}");
    // No tenant at all is refused, never folded into a scope shared by every such request.
    let (status, headers, _) = send(&app, None, "order-1", "{\"amount\":10}").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(headers["content-type"], "application/problem+json");
    // A tenant name that is a prefix or extension of another is another tenant.
    let (_, _, prefix) = send(&app, Some("acm"), "order-1", "{\"amount\":10}").await;
    assert_eq!(prefix, "run 4 for acm: {\"amount\":10}");

    // Each tenant's retry replays its own answer.
    for (tenant, expected) in [
        (Some("acme"), &acme),
        (Some("globex"), &globex),
        (Some("acm"), &prefix),
    ] {
        let (status, headers, body) = send(&app, tenant, "order-1", "{\"amount\":10}").await;
        assert_eq!(status, StatusCode::CREATED);
        assert_eq!(headers["idempotent-replayed"], "true");
        assert_eq!(&body, expected);
    }
    // Within a tenant, the other payload is still a mismatch.
    let (status, ..) = send(&app, Some("acme"), "order-1", "{\"amount\":11}").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(runs.load(Ordering::SeqCst), 4);
}

async fn stored_bytes(store: &MemoryStore, tenant: &str, key: &str) -> Bytes {
    let scope = Scope::new("iso").with_principal(tenant);
    let storage_key = scope.storage_key(&IdempotencyKey::parse(key).unwrap());
    let record = store.get(&storage_key).await.unwrap().expect("a record");
    record.outcome.expect("completed").body
}

#[tokio::test]
async fn credentials_are_not_stored_unless_enabled() {
    let store = Arc::new(MemoryStore::new());
    let (app, runs) = tenant_app(store.clone(), false);
    let (_, first, _) = send(&app, Some("acme"), "k-cred", "{}").await;
    // The first response reaches the client whole.
    assert!(first.contains_key("set-cookie") && first.contains_key("authorization"));
    let (_, replay, _) = send(&app, Some("acme"), "k-cred", "{}").await;
    assert_eq!(replay["idempotent-replayed"], "true");
    for name in ["set-cookie", "authorization", "www-authenticate"] {
        assert!(!replay.contains_key(name), "{name} was replayed");
    }
    assert_eq!(replay["x-run"], "1");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // Not in the store either, not even as bytes.
    let raw = stored_bytes(&store, "acme", "k-cred").await;
    let decoded = StoredResponse::decode(&raw).unwrap();
    assert!(!decoded.headers.contains_key("set-cookie"));
    let text = String::from_utf8_lossy(&raw);
    for secret in ["s3cr3t-cookie", "s3cr3t-token", "s3cr3t-realm"] {
        assert!(!text.contains(secret), "{secret} is in the store");
    }

    // Enabled: stored and replayed.
    let store = Arc::new(MemoryStore::new());
    let (app, _) = tenant_app(store.clone(), true);
    send(&app, Some("acme"), "k-cred", "{}").await;
    let (_, replay, _) = send(&app, Some("acme"), "k-cred", "{}").await;
    assert_eq!(replay["idempotent-replayed"], "true");
    assert_eq!(replay["set-cookie"], "session=s3cr3t-cookie; HttpOnly");
    assert_eq!(replay["authorization"], "Bearer s3cr3t-token");
    let raw = stored_bytes(&store, "acme", "k-cred").await;
    assert!(String::from_utf8_lossy(&raw).contains("s3cr3t-cookie"));
}

#[tokio::test]
async fn stored_records_carry_neither_the_raw_key_nor_the_tenant() {
    let store = Arc::new(MemoryStore::new());
    let (app, _) = tenant_app(store.clone(), false);
    send(&app, Some("tenant-alpha-7"), "raw-key-xyz-42", "{}").await;
    let scope = Scope::new("iso").with_principal("tenant-alpha-7");
    let storage_key = scope.storage_key(&IdempotencyKey::parse("raw-key-xyz-42").unwrap());
    let hex = storage_key.to_hex();
    assert_eq!(hex.len(), 64);
    assert!(!hex.contains("raw-key") && !hex.contains("tenant"));
    let mut record = store.get(&storage_key).await.unwrap().expect("stored");
    // The outcome is the handler's own answer (this one echoes the tenant); everything the
    // layer adds to the record is hashed.
    record.outcome = None;
    let debug = format!("{record:?}");
    assert!(!debug.contains("raw-key-xyz-42"), "{debug}");
    assert!(!debug.contains("tenant-alpha-7"), "{debug}");
}
