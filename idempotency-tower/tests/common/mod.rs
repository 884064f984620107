//! Shared pieces of the integration tests: a real axum app, a store that can go dark, helpers.
#![allow(dead_code, clippy::unwrap_used, unreachable_pub)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use http_body_util::BodyExt;
use idempotency_core::{
    Claim, ClaimRequest, CompleteRequest, FencingToken, MemoryStore, Record, StorageKey, Store,
    StoreError, TouchRequest,
};
use serde::Deserialize;
use tokio::sync::Notify;

/// What the handlers did: how many times each ran, and a signal when the slow one ends.
#[derive(Default)]
pub struct Calls {
    pub orders: AtomicUsize,
    pub fail: AtomicUsize,
    pub status: AtomicUsize,
    pub slow: AtomicUsize,
    pub list: AtomicUsize,
    pub big: AtomicUsize,
    pub slow_started: Notify,
    pub slow_finished: Notify,
    pub slow_done: AtomicBool,
    pub held: AtomicUsize,
    pub held_started: Notify,
    pub held_release: Notify,
}

#[derive(Deserialize)]
pub struct StatusQuery {
    code: u16,
}

#[derive(Deserialize)]
pub struct SlowQuery {
    ms: u64,
}

async fn create_order(State(calls): State<Arc<Calls>>, body: Bytes) -> Response {
    let n = calls.orders.fetch_add(1, Ordering::SeqCst) + 1;
    let mut response = (
        StatusCode::CREATED,
        Json(serde_json::json!({ "order": n, "echo": String::from_utf8_lossy(&body) })),
    )
        .into_response();
    let headers = response.headers_mut();
    headers.insert("x-order-id", HeaderValue::from(n));
    headers.insert(
        "location",
        HeaderValue::from_str(&format!("/orders/{n}")).unwrap(),
    );
    headers.insert("set-cookie", HeaderValue::from_static("session=s3cr3t"));
    headers.insert(
        "date",
        HeaderValue::from_static("Mon, 30 Nov 2026 06:00:00 GMT"),
    );
    headers.insert("connection", HeaderValue::from_static("keep-alive"));
    response
}

async fn fail(State(calls): State<Arc<Calls>>) -> impl IntoResponse {
    let n = calls.fail.fetch_add(1, Ordering::SeqCst) + 1;
    (StatusCode::INTERNAL_SERVER_ERROR, format!("failure {n}"))
}

async fn status(
    State(calls): State<Arc<Calls>>,
    Query(q): Query<StatusQuery>,
) -> impl IntoResponse {
    let n = calls.status.fetch_add(1, Ordering::SeqCst) + 1;
    (StatusCode::from_u16(q.code).unwrap(), format!("answer {n}"))
}

async fn slow(State(calls): State<Arc<Calls>>, Query(q): Query<SlowQuery>) -> impl IntoResponse {
    let n = calls.slow.fetch_add(1, Ordering::SeqCst) + 1;
    calls.slow_started.notify_one();
    tokio::time::sleep(Duration::from_millis(q.ms)).await;
    calls.slow_done.store(true, Ordering::SeqCst);
    calls.slow_finished.notify_one();
    (StatusCode::OK, format!("slow {n}"))
}

/// Runs until the test releases it.
async fn held(State(calls): State<Arc<Calls>>) -> impl IntoResponse {
    let n = calls.held.fetch_add(1, Ordering::SeqCst) + 1;
    calls.held_started.notify_one();
    calls.held_release.notified().await;
    (StatusCode::OK, format!("held {n}"))
}

async fn list(State(calls): State<Arc<Calls>>) -> impl IntoResponse {
    let n = calls.list.fetch_add(1, Ordering::SeqCst) + 1;
    format!("list {n}")
}

async fn big(State(calls): State<Arc<Calls>>, body: Bytes) -> impl IntoResponse {
    calls.big.fetch_add(1, Ordering::SeqCst);
    vec![b'x'; body.len()]
}

/// The app under test, without the layer.
pub fn routes(calls: Arc<Calls>) -> Router {
    Router::new()
        .route("/orders", post(create_order).get(list))
        .route("/fail", post(fail))
        .route("/status", post(status))
        .route("/slow", post(slow))
        .route("/held", post(held))
        .route("/big", post(big))
        .route("/list", get(list))
        .with_state(calls)
}

/// A POST with a key and a body.
pub fn post_with_key(uri: &str, key: Option<&str>, body: &str) -> http::Request<Body> {
    let mut request = http::Request::post(uri).header("content-type", "application/json");
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    request.body(Body::from(body.to_owned())).unwrap()
}

/// Status, headers and the whole body of a response.
pub async fn read(response: Response) -> (StatusCode, HeaderMap, Bytes) {
    let (parts, body) = response.into_parts();
    (
        parts.status,
        parts.headers,
        body.collect().await.unwrap().to_bytes(),
    )
}

/// The problem+json body of a refusal, after checking its framing.
pub async fn problem(response: Response, status: u16) -> serde_json::Value {
    let (got, headers, body) = read(response).await;
    assert_eq!(
        got.as_u16(),
        status,
        "body: {}",
        String::from_utf8_lossy(&body)
    );
    assert_eq!(headers["content-type"], "application/problem+json");
    let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(problem["status"], status);
    assert!(
        problem["type"]
            .as_str()
            .unwrap()
            .starts_with("urn:idempotency:")
    );
    assert!(problem["title"].is_string() && problem["detail"].is_string());
    problem
}

/// A real memory store whose "network" can be cut: while down, every call hangs forever, the
/// way a store behind a dead link or a full connection pool does, so the engine's timeout fires.
/// `claim_delay_ms` makes every claim that long (a slow link).
#[derive(Default)]
pub struct Partitionable {
    pub inner: MemoryStore,
    pub down: AtomicBool,
    pub claim_delay_ms: AtomicU64,
}

impl Partitionable {
    async fn gate(&self) {
        if self.down.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
    }
}

impl Store for Partitionable {
    async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        self.gate().await;
        let delay = self.claim_delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        self.inner.claim(request).await
    }
    async fn complete(&self, request: CompleteRequest<'_>) -> Result<(), StoreError> {
        self.gate().await;
        self.inner.complete(request).await
    }
    async fn release(&self, key: &StorageKey, token: FencingToken) -> Result<(), StoreError> {
        self.gate().await;
        self.inner.release(key, token).await
    }
    async fn undo_claim(
        &self,
        key: &StorageKey,
        claim_id: idempotency_core::ClaimId,
    ) -> Result<bool, StoreError> {
        self.gate().await;
        self.inner.undo_claim(key, claim_id).await
    }
    async fn touch(&self, request: TouchRequest<'_>) -> Result<(), StoreError> {
        self.gate().await;
        self.inner.touch(request).await
    }
    async fn get(&self, key: &StorageKey) -> Result<Option<Record>, StoreError> {
        self.gate().await;
        self.inner.get(key).await
    }
    async fn purge_expired(&self, limit: usize) -> Result<u64, StoreError> {
        self.gate().await;
        self.inner.purge_expired(limit).await
    }
}

/// A unique key per test run.
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    )
}

/// Runs `test` on a PostgreSQL store over a fresh table named after `prefix` (`DATABASE_URL`,
/// default `postgres://postgres@127.0.0.1:5432/test`), then drops the table. An unreachable
/// server skips with a printed reason (fails under `CI=true`).
#[cfg(feature = "postgres")]
pub async fn on_postgres<F, Fut>(prefix: &str, test: F)
where
    F: FnOnce(idempotency_sql::PostgresStore) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let pool = match sqlx::PgPool::connect(&url).await {
        Ok(pool) => pool,
        Err(error) => {
            return idempotency_test::unavailable::<()>("PostgreSQL", error).unwrap_or_default();
        }
    };
    let table = format!(
        "{prefix}_{}",
        &idempotency_test::unique_key().to_hex()[..12]
    );
    let store = idempotency_sql::PostgresStore::new(pool.clone())
        .with_table_name(&table)
        .unwrap();
    store.migrate().await.unwrap();
    test(store).await;
    for drop in [
        format!("DROP TABLE \"{table}\""),
        format!("DROP SEQUENCE \"{table}_token_seq\""),
        format!("DELETE FROM idempotency_schema WHERE table_name = '{table}'"),
    ] {
        sqlx::query(&drop).execute(&pool).await.unwrap();
    }
}
