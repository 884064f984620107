//! Transactional HTTP scenarios, written once over any database's harness ([`Harness`]) and
//! run against the real servers by `transactional.rs`: a real axum router whose handler grants
//! a coupon in the request's transaction ([`Tx`]) behind a [`TransactionalLayer`].
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    dead_code,
    unreachable_pub,
    missing_docs
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use bytes::Bytes;
use http_body_util::BodyExt;
use idempotency_core::{IdempotencyKey, InFlightPolicy, RecordState, Scope, Store};
use idempotency_sql::TxStore;
use idempotency_test::unique_key;
use idempotency_tower::transactional::TransactionalLayer;
use idempotency_tower::{
    ConflictAnswer, Deadline, FingerprintSource, IdempotencyLayer, IdempotencyLayerBuilder,
    ScopeChosen,
};
use tokio::sync::Semaphore;
use tower::ServiceExt;

mod slow_body;
pub use slow_body::slow_bodies_hold_no_transaction;
/// A layer's builder once its scope is chosen.
pub type Builder<S> = IdempotencyLayerBuilder<S, ScopeChosen>;

/// The namespace of the guarded route.
pub const NAMESPACE: &str = "tx.grants";

/// What the handlers did.
pub struct Counters {
    /// Handler runs, by any request.
    pub runs: AtomicUsize,
    /// A permit per handler start.
    started: Semaphore,
}

impl Default for Counters {
    fn default() -> Self {
        Self {
            runs: AtomicUsize::new(0),
            started: Semaphore::new(0),
        }
    }
}

impl Counters {
    /// Counts a handler run.
    pub fn run(&self) {
        self.runs.fetch_add(1, Ordering::SeqCst);
        self.started.add_permits(1);
    }

    /// Waits until one more handler has started.
    pub async fn started(&self) {
        self.started.acquire().await.unwrap().forget();
    }
}

/// One database's side of the scenarios: its store and pool, its handlers (they differ only in
/// their `Tx<Database>` and SQL placeholders), and a count of the coupons granted.
pub trait Harness: Send + Sync + Sized + 'static {
    /// The store of the harness's database.
    type Store: TxStore + Clone;

    /// The store (its own table), migrated.
    fn store(&self) -> Self::Store;

    /// Another pool on the same database with at most `connections`, and its store on the same
    /// table: another process, as far as the database can tell.
    fn other_process(&self, connections: u32) -> impl Future<Output = Self::Store> + Send;

    /// The routes: `POST /grant` (grants a coupon in the request's transaction, then answers as
    /// its body's `mode` says) and `POST /plain` (no transaction asked for).
    fn routes(&self, counters: Arc<Counters>) -> Router;

    /// How many coupons `trade_no` holds.
    fn grants(&self, trade_no: &str) -> impl Future<Output = i64> + Send;

    /// Drops the harness's tables (and their schema versions).
    fn cleanup(&self) -> impl Future<Output = ()> + Send;

    /// Whether the database has one writer at a time (SQLite): it can only wait, and two
    /// transactions never write at once.
    fn single_writer(&self) -> bool {
        false
    }
}

/// A router behind a layer built by `configure` over `store`.
pub fn app<H: Harness>(
    harness: &H,
    store: H::Store,
    counters: &Arc<Counters>,
    configure: impl FnOnce(Builder<H::Store>) -> Builder<H::Store>,
) -> Router {
    let layer: TransactionalLayer<H::Store> = configure(
        IdempotencyLayer::builder(store)
            .shared_scope()
            .namespace(NAMESPACE),
    )
    .build_transactional();
    harness.routes(Arc::clone(counters)).layer(layer)
}

/// The callback preset with a 3 s wait, the key the body's `trade_no`, the fingerprint its
/// `trade_no` and `mode` (so a duplicate may ask the handler to wait another time).
pub fn callback<S: TxStore>(builder: Builder<S>) -> Builder<S> {
    builder
        .callback("/trade_no")
        .fingerprint_json_fields(["/trade_no", "/mode"])
        .wait_in_flight(Duration::from_secs(3))
}

/// A fresh trade number.
pub fn trade() -> String {
    format!("T{}", &unique_key().to_hex()[..20])
}

/// `POST /grant` with `{"trade_no", "mode", "ms"}`.
pub fn grant(trade_no: &str, mode: &str, ms: u64) -> http::Request<Body> {
    http::Request::post("/grant")
        .header("content-type", "application/json")
        .body(Body::from(
            serde_json::json!({ "trade_no": trade_no, "mode": mode, "ms": ms }).to_string(),
        ))
        .unwrap()
}

/// Sends `request` to `app` and reads the answer whole.
pub async fn send(app: &Router, request: http::Request<Body>) -> (StatusCode, HeaderMap, Bytes) {
    let response = app.clone().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    (
        parts.status,
        parts.headers,
        body.collect().await.unwrap().to_bytes(),
    )
}

fn replayed(headers: &HeaderMap) -> bool {
    headers
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true")
}

/// The record of `trade_no`, as the layer keys it.
async fn record<S: Store>(store: &S, trade_no: &str) -> Option<idempotency_core::Record> {
    let key = Scope::new(NAMESPACE).storage_key(&IdempotencyKey::parse(trade_no).unwrap());
    store.get(&key).await.unwrap()
}

/// The first request runs the handler, whose coupon and record commit together; retries get
/// the stored answer with `Idempotent-Replayed` and grant nothing.
pub async fn first_runs_then_replays<H: Harness>(harness: &H) {
    let counters = Arc::new(Counters::default());
    let store = harness.store();
    let app = app(harness, store.clone(), &counters, callback);
    let trade_no = trade();
    let (status, headers, body) = send(&app, grant(&trade_no, "ok", 0)).await;
    assert_eq!(status, StatusCode::OK, "{body:?}");
    assert!(!replayed(&headers));
    assert_eq!(body, format!("granted {trade_no}"));
    for _ in 0..3 {
        let (status, headers, again) = send(&app, grant(&trade_no, "ok", 0)).await;
        assert_eq!(status, StatusCode::OK);
        assert!(replayed(&headers));
        assert_eq!(again, body);
    }
    assert_eq!(counters.runs.load(Ordering::SeqCst), 1);
    assert_eq!(harness.grants(&trade_no).await, 1);
    let record = record(&store, &trade_no).await.expect("a record");
    assert_eq!(record.state, RecordState::Completed);
    assert_eq!(record.outcome.map(|o| o.status), Some(200));
}

/// A handler error, a response the callback preset does not store (404) and a panic roll the
/// business writes back with the claim: no coupon, no record, and the identical retry runs at
/// once.
pub async fn failures_leave_nothing<H: Harness>(harness: &H) {
    let counters = Arc::new(Counters::default());
    let store = harness.store();
    let app = app(harness, store.clone(), &counters, callback);
    for (mode, status) in [
        ("fail", StatusCode::INTERNAL_SERVER_ERROR),
        ("not_found", StatusCode::NOT_FOUND),
        ("bad_request", StatusCode::BAD_REQUEST),
    ] {
        let trade_no = trade();
        let (answered, headers, _) = send(&app, grant(&trade_no, mode, 0)).await;
        assert_eq!(answered, status, "{mode}");
        assert!(!replayed(&headers));
        assert_eq!(harness.grants(&trade_no).await, 0, "{mode}: rolled back");
        assert!(
            record(&store, &trade_no).await.is_none(),
            "{mode}: no record"
        );
        let started = Instant::now();
        let (answered, headers, _) = send(&app, grant(&trade_no, "ok", 0)).await;
        assert_eq!(answered, StatusCode::OK, "{mode}: the retry runs");
        assert!(!replayed(&headers));
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{mode}: at once"
        );
        assert_eq!(harness.grants(&trade_no).await, 1);
    }

    let trade_no = trade();
    let task = tokio::spawn({
        let app = app.clone();
        let request = grant(&trade_no, "panic", 0);
        async move { app.oneshot(request).await }
    });
    assert!(task.await.unwrap_err().is_panic());
    assert_eq!(harness.grants(&trade_no).await, 0, "panic: rolled back");
    assert!(record(&store, &trade_no).await.is_none());
    let started = Instant::now();
    let (answered, _, _) = send(&app, grant(&trade_no, "ok", 0)).await;
    assert_eq!(answered, StatusCode::OK, "panic: the retry runs");
    assert!(started.elapsed() < Duration::from_secs(2), "panic: at once");
    assert_eq!(harness.grants(&trade_no).await, 1);
}

/// A handler that commits without a record keeps its writes and frees the key.
pub async fn commit_without_record<H: Harness>(harness: &H) {
    let counters = Arc::new(Counters::default());
    let store = harness.store();
    let app = app(harness, store.clone(), &counters, callback);
    let trade_no = trade();
    let (status, _, _) = send(&app, grant(&trade_no, "without_record", 0)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(harness.grants(&trade_no).await, 1, "the writes stay");
    assert!(record(&store, &trade_no).await.is_none(), "no record");
    let (status, headers, _) = send(&app, grant(&trade_no, "ok", 0)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!replayed(&headers), "the key runs again");
    assert_eq!(harness.grants(&trade_no).await, 2);
}

/// The layer's refusals, none of which claims anything: the same key with another payload
/// (422), no key (400), a body over the limit (413), and a request that fails verification
/// (401) — a forged callback carrying a real trade number neither runs nor takes its key, nor
/// reads its stored answer.
pub async fn refusals_claim_nothing<H: Harness>(harness: &H) {
    let counters = Arc::new(Counters::default());
    let store = harness.store();
    let app = app(harness, store.clone(), &counters, |builder| {
        callback(builder)
            .on_conflict(ConflictAnswer::Reject)
            .max_body_bytes(256)
            .verify(|parts, body| {
                let expected = format!("len-{}", body.len());
                match parts.headers.get("x-signature") {
                    Some(signature) if signature.as_bytes() == expected.as_bytes() => Ok(()),
                    _ => Err("the signature does not match".to_owned()),
                }
            })
    });
    let signed = |request: http::Request<Body>| async move {
        let (mut parts, body) = request.into_parts();
        let bytes = body.collect().await.unwrap().to_bytes();
        parts.headers.insert(
            "x-signature",
            format!("len-{}", bytes.len()).parse().unwrap(),
        );
        http::Request::from_parts(parts, Body::from(bytes))
    };

    let trade_no = trade();
    // Forged first: refused, nothing claimed, nothing run.
    let (status, headers, body) = send(&app, grant(&trade_no, "ok", 0)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body:?}");
    assert_eq!(headers["content-type"], "application/problem+json");
    assert!(record(&store, &trade_no).await.is_none());
    // The real one runs.
    let (status, headers, _) = send(&app, signed(grant(&trade_no, "ok", 0)).await).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!replayed(&headers));
    // A forged one after it learns nothing of the stored answer.
    let (status, headers, _) = send(&app, grant(&trade_no, "ok", 0)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(!replayed(&headers));
    // Same key, other payload: refused, and the record is marked for reconciliation.
    assert_eq!(
        record(&store, &trade_no).await.map(|r| r.conflicts),
        Some(0)
    );
    let (status, _, body) = send(&app, signed(grant(&trade_no, "other", 0)).await).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body:?}");
    assert_eq!(
        record(&store, &trade_no).await.map(|r| r.conflicts),
        Some(1)
    );
    // No key, and a body over the limit.
    let no_key = http::Request::post("/grant")
        .header("content-type", "application/json")
        .body(Body::from(r#"{"mode":"ok"}"#))
        .unwrap();
    let (status, _, _) = send(&app, signed(no_key).await).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let big = grant(&trade_no, &"x".repeat(300), 0);
    let (status, _, _) = send(&app, signed(big).await).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(counters.runs.load(Ordering::SeqCst), 1);
    assert_eq!(harness.grants(&trade_no).await, 1);
}

/// The callback preset answers a conflicting callback (same trade, another payload) with the
/// stored success, read from the committed record, runs nothing, and marks the record: found
/// by this process's completed keys, or by another process's claim.
pub async fn a_conflicting_callback_gets_the_stored_success<H: Harness>(harness: &H) {
    let counters = Arc::new(Counters::default());
    let store = harness.store();
    let this = app(harness, store.clone(), &counters, callback);
    let trade_no = trade();
    let (status, headers, first) = send(&this, grant(&trade_no, "ok", 0)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!replayed(&headers));
    let (status, headers, again) = send(&this, grant(&trade_no, "other", 0)).await;
    assert_eq!(status, StatusCode::OK, "{again:?}");
    assert!(replayed(&headers));
    assert_eq!(again, first);
    let marked = record(&store, &trade_no).await.unwrap();
    assert_eq!(marked.conflicts, 1);
    assert!(marked.last_conflict_at.is_some());
    let other = app(harness, harness.other_process(4).await, &counters, callback);
    let (status, headers, again) = send(&other, grant(&trade_no, "other", 0)).await;
    assert_eq!(status, StatusCode::OK, "{again:?}");
    assert!(replayed(&headers));
    assert_eq!(again, first);
    assert_eq!(
        record(&store, &trade_no).await.map(|r| r.conflicts),
        Some(2)
    );
    assert_eq!(counters.runs.load(Ordering::SeqCst), 1);
    assert_eq!(harness.grants(&trade_no).await, 1);
}

/// Concurrent duplicates in one process: one runs, the others wait for its commit (in memory)
/// and replay it.
pub async fn concurrent_duplicates_run_once<H: Harness>(harness: &H) {
    let counters = Arc::new(Counters::default());
    let app = app(harness, harness.store(), &counters, callback);
    let trade_no = trade();
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let (app, request) = (app.clone(), grant(&trade_no, "ok", 200));
            tokio::spawn(async move { send(&app, request).await })
        })
        .collect();
    let mut fresh = 0;
    for task in tasks {
        let (status, headers, body) = task.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{body:?}");
        fresh += usize::from(!replayed(&headers));
    }
    assert_eq!(fresh, 1);
    assert_eq!(counters.runs.load(Ordering::SeqCst), 1);
    assert_eq!(harness.grants(&trade_no).await, 1);
}

/// Duplicates from another process wait on the first one's uncommitted record in the database
/// and replay it once committed; with [`InFlightPolicy::Reject`] they are refused at once (409),
/// where the database can (not SQLite).
pub async fn duplicates_across_processes<H: Harness>(harness: &H) {
    let counters = Arc::new(Counters::default());
    let first = app(harness, harness.store(), &counters, callback);
    let waiting = app(harness, harness.other_process(4).await, &counters, callback);
    let trade_no = trade();
    let owner = tokio::spawn({
        let (app, request) = (first.clone(), grant(&trade_no, "ok", 600));
        async move { send(&app, request).await }
    });
    counters.started().await;
    let (status, headers, _) = send(&waiting, grant(&trade_no, "ok", 0)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(replayed(&headers), "waited on the row, then replayed");
    assert!(!replayed(&owner.await.unwrap().1));
    assert_eq!(counters.runs.load(Ordering::SeqCst), 1);

    if harness.single_writer() {
        return;
    }
    let rejecting = app(
        harness,
        harness.other_process(4).await,
        &counters,
        |builder| callback(builder).in_flight(InFlightPolicy::Reject),
    );
    let trade_no = trade();
    let owner = tokio::spawn({
        let (app, request) = (first.clone(), grant(&trade_no, "ok", 1500));
        async move { send(&app, request).await }
    });
    counters.started().await;
    let started = Instant::now();
    let (status, headers, body) = send(&rejecting, grant(&trade_no, "ok", 0)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body:?}");
    assert!(headers.contains_key("retry-after"));
    assert!(
        started.elapsed() < Duration::from_millis(1000),
        "refused without waiting for the owner"
    );
    assert_eq!(owner.await.unwrap().0, StatusCode::OK);
    assert_eq!(harness.grants(&trade_no).await, 1);
}

/// A wait never outlives the caller's deadline: with 300 ms left, a duplicate of a 2 s handler
/// is refused after about 300 ms, not 3 s.
pub async fn deadlines_bound_the_wait<H: Harness>(harness: &H) {
    let counters = Arc::new(Counters::default());
    let first = app(harness, harness.store(), &counters, callback);
    let other = app(harness, harness.other_process(4).await, &counters, callback);
    for app in [&first, &other] {
        let trade_no = trade();
        let owner = tokio::spawn({
            let (app, request) = (first.clone(), grant(&trade_no, "ok", 2000));
            async move { send(&app, request).await }
        });
        counters.started().await;
        let mut request = grant(&trade_no, "ok", 0);
        request
            .extensions_mut()
            .insert(Deadline(Instant::now() + Duration::from_millis(300)));
        let started = Instant::now();
        let (status, _, _) = send(app, request).await;
        if harness.single_writer() && std::ptr::eq(app, &other) {
            // Another SQLite connection waits for the write lock itself: no transaction in time.
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        } else {
            assert_eq!(status, StatusCode::CONFLICT);
        }
        assert!(
            started.elapsed() < Duration::from_millis(1500),
            "stopped at the deadline, after {:?}",
            started.elapsed()
        );
        assert_eq!(owner.await.unwrap().0, StatusCode::OK);
    }
}

/// Duplicates of keys in flight elsewhere never take all the pool's connections: with a pool
/// of 2 and one claim allowed to wait on the database, a request for a fresh key still gets a
/// connection while three duplicates wait.
pub async fn waiters_leave_connections<H: Harness>(harness: &H) {
    if harness.single_writer() {
        // Three owners cannot write at once: SQLite has one writer.
        return;
    }
    let counters = Arc::new(Counters::default());
    let first = app(harness, harness.store(), &counters, callback);
    let small = harness.other_process(2).await;
    let other = app(harness, small, &counters, |builder| {
        callback(builder)
            .claim_permits(1)
            .store_timeout(Duration::from_millis(800))
    });
    let trades: Vec<String> = (0..3).map(|_| trade()).collect();
    let owners: Vec<_> = trades
        .iter()
        .map(|trade_no| {
            let (app, request) = (first.clone(), grant(trade_no, "ok", 2000));
            tokio::spawn(async move { send(&app, request).await })
        })
        .collect();
    for _ in &trades {
        counters.started().await;
    }
    let waiters: Vec<_> = trades
        .iter()
        .map(|trade_no| {
            let (app, request) = (other.clone(), grant(trade_no, "ok", 0));
            tokio::spawn(async move { send(&app, request).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let fresh = trade();
    let started = Instant::now();
    let (status, _, body) = send(&other, grant(&fresh, "ok", 0)).await;
    assert_eq!(status, StatusCode::OK, "a fresh key runs: {body:?}");
    assert!(started.elapsed() < Duration::from_millis(1500));
    for owner in owners {
        assert_eq!(owner.await.unwrap().0, StatusCode::OK);
    }
    for waiter in waiters {
        let (status, headers, _) = waiter.await.unwrap();
        assert_eq!(status, StatusCode::OK);
        assert!(replayed(&headers));
    }
    for trade_no in &trades {
        assert_eq!(harness.grants(trade_no).await, 1);
    }
}

/// A client that goes away does not abandon the handler: it runs to its commit, and the retry
/// replays it.
pub async fn disconnects_run_to_commit<H: Harness>(harness: &H) {
    let counters = Arc::new(Counters::default());
    let store = harness.store();
    let app = app(harness, store.clone(), &counters, callback);
    let trade_no = trade();
    let client = tokio::spawn({
        let (app, request) = (app.clone(), grant(&trade_no, "ok", 400));
        async move { send(&app, request).await }
    });
    counters.started().await;
    client.abort();
    let deadline = Instant::now() + Duration::from_secs(5);
    while record(&store, &trade_no).await.map(|r| r.state) != Some(RecordState::Completed) {
        assert!(Instant::now() < deadline, "the handler never committed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(harness.grants(&trade_no).await, 1);
    let (status, headers, _) = send(&app, grant(&trade_no, "ok", 0)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(replayed(&headers));
    assert_eq!(counters.runs.load(Ordering::SeqCst), 1);
}

/// A handler that keeps the transaction past its answer gets a 500 and nothing commits; a
/// route without the layer cannot take a transaction (500); a store that cannot begin one
/// answers 503 with `Retry-After`.
pub async fn misuse_and_outage<H: Harness>(harness: &H) {
    let counters = Arc::new(Counters::default());
    let store = harness.store();
    let guarded = app(harness, store.clone(), &counters, callback);
    let trade_no = trade();
    let (status, headers, _) = send(&guarded, grant(&trade_no, "keep", 0)).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(headers["content-type"], "application/problem+json");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(harness.grants(&trade_no).await, 0);
    assert!(record(&store, &trade_no).await.is_none());

    let bare = harness.routes(Arc::clone(&counters));
    let (status, _, body) = send(&bare, grant(&trade(), "ok", 0)).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body:?}");

    let closed = harness.other_process(1).await;
    closed.pool().close().await;
    let down = app(harness, closed, &counters, callback);
    let (status, headers, _) = send(&down, grant(&trade(), "ok", 0)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(headers.contains_key("retry-after"));
}

/// The layer's HTTP record, a hand-written transactional claim and a function's record in one
/// namespace of one table never answer for each other (they used to read each other's record,
/// and a callback then answered 422 and granted nothing).
pub async fn mechanisms_never_collide<H: Harness>(harness: &H) {
    use idempotency_core::{Fingerprint, Idempotency, Outcome};
    use idempotency_function::{self as function, Call};
    use idempotency_sql::TxClaim;

    let counters = Arc::new(Counters::default());
    let store = harness.store();
    let app = app(harness, store.clone(), &counters, callback);
    let trade_no = trade();
    let (status, _, _) = send(&app, grant(&trade_no, "ok", 0)).await;
    assert_eq!(status, StatusCode::OK);

    // A transaction of the service's own claims the same trade number in the same namespace.
    let key = IdempotencyKey::parse(&trade_no).unwrap();
    let mut tx = store.begin().await.unwrap();
    let claim = store
        .claim_in_tx(
            &mut tx,
            &Scope::new(NAMESPACE),
            &key,
            &Fingerprint::of_bytes(b"x"),
        )
        .await
        .unwrap();
    let TxClaim::Execute(lease) = claim else {
        panic!("the transaction's claim is its own: {claim:?}");
    };
    store
        .complete_in_tx(&mut tx, lease, &Outcome::new(0, "ledger"))
        .await
        .unwrap();
    tx.commit().await.unwrap();

    // A function keyed by the trade number in the same namespace runs once, for itself.
    let engine = Idempotency::new(store.clone());
    let notify = || {
        function::run::<Result<u32, idempotency_core::Error>, _, _, _>(
            engine.clone(),
            Call::new(NAMESPACE, &trade_no),
            From::from,
            async { Ok(7) },
        )
    };
    assert_eq!(notify().await.unwrap(), 7);
    assert_eq!(notify().await.unwrap(), 7);

    // And the HTTP record still replays its own answer.
    let (status, headers, body) = send(&app, grant(&trade_no, "ok", 0)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(replayed(&headers));
    assert_eq!(body, format!("granted {trade_no}"));
    assert_eq!(harness.grants(&trade_no).await, 1);
}

/// A fingerprint changed by a deploy: a retry of a request completed under the previous one is
/// refused as a conflict (422) until the layer reads the previous fingerprint too; then it gets
/// the stored answer, unmarked, while a request that differs under both is still a conflict.
pub async fn a_changed_fingerprint_reads_the_previous_one<H: Harness>(harness: &H) {
    let counters = Arc::new(Counters::default());
    let store = harness.store();
    let before = |builder: Builder<H::Store>| {
        builder
            .callback("/trade_no")
            .fingerprint_json_fields(["/trade_no", "/mode"])
            .on_conflict(ConflictAnswer::Reject)
    };
    let after = |builder: Builder<H::Store>| {
        builder
            .callback("/trade_no")
            .fingerprint_json_fields(["/trade_no", "/ms"])
            .on_conflict(ConflictAnswer::Reject)
    };
    let old = app(harness, store.clone(), &counters, before);
    let trade_no = trade();
    let (status, _, body) = send(&old, grant(&trade_no, "ok", 0)).await;
    assert_eq!(status, StatusCode::OK, "{body:?}");

    let changed = app(harness, store.clone(), &counters, after);
    let (status, _, _) = send(&changed, grant(&trade_no, "ok", 0)).await;
    assert_eq!(
        status, 422,
        "without the previous fingerprint, the retry conflicts"
    );
    let marks = |store: H::Store, trade_no: String| async move {
        record(&store, &trade_no).await.map(|r| r.conflicts)
    };
    assert_eq!(marks(store.clone(), trade_no.clone()).await, Some(1));

    let reading = app(harness, store.clone(), &counters, |builder| {
        after(builder).previous_fingerprint(FingerprintSource::json_fields(["/trade_no", "/mode"]))
    });
    let (status, headers, again) = send(&reading, grant(&trade_no, "ok", 0)).await;
    assert_eq!(status, StatusCode::OK, "{again:?}");
    assert!(replayed(&headers));
    assert_eq!(again, body);
    assert_eq!(
        marks(store.clone(), trade_no.clone()).await,
        Some(1),
        "a duplicate, unmarked"
    );
    // Another mode: the same request under the new fingerprint, not under the previous one.
    let (status, _, _) = send(&reading, grant(&trade_no, "other", 0)).await;
    assert_eq!(status, 422);
    assert_eq!(marks(store, trade_no.clone()).await, Some(2));
    assert_eq!(counters.runs.load(Ordering::SeqCst), 1);
    assert_eq!(harness.grants(&trade_no).await, 1);
}

/// Writes the scenario tests for one harness: `transactional_tests!(harness_expr)`.
#[macro_export]
macro_rules! transactional_tests {
    ($harness:expr) => {
        $crate::transactional_tests!(@tests $harness;
            first_runs_then_replays,
            failures_leave_nothing,
            commit_without_record,
            refusals_claim_nothing,
            a_conflicting_callback_gets_the_stored_success,
            concurrent_duplicates_run_once,
            duplicates_across_processes,
            deadlines_bound_the_wait,
            waiters_leave_connections,
            disconnects_run_to_commit,
            misuse_and_outage,
            mechanisms_never_collide,
            slow_bodies_hold_no_transaction,
            a_changed_fingerprint_reads_the_previous_one,
        );
    };
    (@tests $harness:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                if let Some(harness) = $harness.await {
                    transactional_support::$name(&harness).await;
                    harness.cleanup().await;
                }
            }
        )*
    };
}
