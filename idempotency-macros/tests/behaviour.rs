//! Dedup mode of `#[idempotent]` on the memory store.
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idempotency_core::{Error, Idempotency, MemoryStore};
use idempotency_function::idempotent;
use serde::{Deserialize, Serialize};
use tokio::sync::{Barrier, Notify};

#[derive(Debug, PartialEq, Serialize, Deserialize)]
enum AppError {
    Declined(String),
    InFlight,
    Mismatch,
    Other(String),
}

impl From<Error> for AppError {
    fn from(error: Error) -> Self {
        match error {
            Error::InFlight { .. } => Self::InFlight,
            Error::Mismatch => Self::Mismatch,
            other => Self::Other(other.to_string()),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct PaymentEvent {
    trade_no: String,
    amount: u64,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Coupon {
    id: usize,
    trade_no: String,
}

struct Payments {
    engine: Idempotency<MemoryStore>,
    granted: AtomicUsize,
}

impl Payments {
    fn new() -> Self {
        Self {
            engine: Idempotency::new(MemoryStore::new()),
            granted: AtomicUsize::new(0),
        }
    }

    #[idempotent(key = event.trade_no, store = self.engine, namespace = "payments.callback", fingerprint = [event.amount], ttl = "1h", lease = "30s")]
    async fn on_paid(&self, event: PaymentEvent) -> Result<Coupon, AppError> {
        if event.amount == 0 {
            return Err(AppError::Declined("zero amount".into()));
        }
        let id = self.granted.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(Coupon {
            id,
            trade_no: event.trade_no,
        })
    }

    #[idempotent(key = trade_no, store = self.engine, namespace = "payments.refund", on_error = "keep")]
    async fn refund(&self, trade_no: &str, allowed: bool) -> Result<usize, AppError> {
        let n = self.granted.fetch_add(1, Ordering::SeqCst) + 1;
        if allowed {
            Ok(n)
        } else {
            Err(AppError::Declined(format!("refund {n} refused")))
        }
    }
}

fn event(trade_no: &str, amount: u64) -> PaymentEvent {
    PaymentEvent {
        trade_no: trade_no.into(),
        amount,
    }
}

#[tokio::test]
async fn duplicate_returns_the_stored_value_without_running_the_body() {
    let payments = Payments::new();
    let first = payments.on_paid(event("T1", 100)).await.unwrap();
    let second = payments.on_paid(event("T1", 100)).await.unwrap();
    assert_eq!(first, second);
    assert_eq!(first.id, 1);
    assert_eq!(payments.granted.load(Ordering::SeqCst), 1);
    let other = payments.on_paid(event("T2", 100)).await.unwrap();
    assert_eq!(other.id, 2);
}

#[tokio::test]
async fn an_error_releases_the_key_so_a_retry_runs_again() {
    let payments = Payments::new();
    let declined = payments.on_paid(event("T3", 0)).await;
    assert_eq!(declined, Err(AppError::Declined("zero amount".into())));
    // Released: the same key with the same fingerprint runs again.
    let again = payments.on_paid(event("T3", 0)).await;
    assert_eq!(again, Err(AppError::Declined("zero amount".into())));
    // And a successful retry (same key, new fingerprint allowed after a release) is stored.
    let ok = payments.on_paid(event("T3", 5)).await.unwrap();
    assert_eq!(payments.on_paid(event("T3", 5)).await.unwrap(), ok);
}

#[tokio::test]
async fn on_error_keep_stores_and_replays_the_error() {
    let payments = Payments::new();
    let refused = payments.refund("R1", false).await;
    assert_eq!(refused, Err(AppError::Declined("refund 1 refused".into())));
    // The stored error is replayed, even though the new call would succeed.
    assert_eq!(payments.refund("R1", true).await, refused);
    assert_eq!(payments.granted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_same_key_with_other_fingerprinted_arguments_is_a_mismatch() {
    let payments = Payments::new();
    payments.on_paid(event("T4", 100)).await.unwrap();
    assert_eq!(
        payments.on_paid(event("T4", 999)).await,
        Err(AppError::Mismatch)
    );
    assert_eq!(payments.granted.load(Ordering::SeqCst), 1);
}

#[idempotent(key = job, store = engine, fingerprint = [job])]
async fn blocking_job(
    engine: &Idempotency<MemoryStore>,
    job: &str,
    started: &Notify,
    release: &Notify,
    runs: &AtomicUsize,
) -> Result<usize, AppError> {
    runs.fetch_add(1, Ordering::SeqCst);
    started.notify_one();
    release.notified().await;
    Ok(7)
}

#[idempotent(key = job, store = engine, fingerprint = [job], wait = "30s")]
async fn waiting_job(
    engine: &Idempotency<MemoryStore>,
    job: &str,
    runs: &AtomicUsize,
) -> Result<usize, AppError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(9)
}

#[tokio::test]
async fn a_duplicate_in_flight_is_refused_or_waits_for_the_result() {
    let engine = Idempotency::new(MemoryStore::new());
    let (started, release, runs) = (Notify::new(), Notify::new(), AtomicUsize::new(0));
    let first = blocking_job(&engine, "J1", &started, &release, &runs);
    let second = async {
        started.notified().await;
        let busy = blocking_job(&engine, "J1", &started, &release, &runs).await;
        release.notify_one();
        busy
    };
    let (first, second) = tokio::join!(first, second);
    assert_eq!(first, Ok(7));
    assert_eq!(second, Err(AppError::InFlight));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(
        blocking_job(&engine, "J1", &started, &release, &runs).await,
        Ok(7)
    );
}

#[tokio::test]
async fn two_hundred_concurrent_duplicates_run_the_body_once() {
    let engine = Idempotency::new(MemoryStore::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(Barrier::new(250));
    let mut tasks = Vec::new();
    for _ in 0..250 {
        let (engine, runs, barrier) = (engine.clone(), Arc::clone(&runs), Arc::clone(&barrier));
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            waiting_job(&engine, "J-concurrent", &runs).await
        }));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap(), Ok(9));
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[idempotent(key = format!("{tenant}:{order}"), store = engine, principal = tenant, namespace = "orders")]
async fn create_order<S>(
    engine: Arc<Idempotency<S>>,
    tenant: &str,
    order: u32,
    runs: &AtomicUsize,
) -> Result<String, AppError>
where
    S: idempotency_core::Store,
{
    let n = runs.fetch_add(1, Ordering::SeqCst);
    let parsed: u32 = format!("{order}")
        .parse()
        .map_err(|_| AppError::Other("parse".into()))?;
    Ok(format!("{tenant}/{parsed}/{n}"))
}

#[tokio::test]
async fn generics_where_clauses_arc_engines_and_principals() {
    let engine = Arc::new(Idempotency::new(MemoryStore::new()));
    let runs = AtomicUsize::new(0);
    let a = create_order(Arc::clone(&engine), "acme", 1, &runs)
        .await
        .unwrap();
    assert_eq!(a, "acme/1/0");
    assert_eq!(
        create_order(Arc::clone(&engine), "acme", 1, &runs)
            .await
            .unwrap(),
        a
    );
    let b = create_order(Arc::clone(&engine), "globex", 1, &runs)
        .await
        .unwrap();
    assert_eq!(b, "globex/1/1");
}

static ENGINE: std::sync::LazyLock<Idempotency<MemoryStore>> =
    std::sync::LazyLock::new(|| Idempotency::new(MemoryStore::new()));

#[idempotent(key = id, store = ENGINE, map_err = to_text)]
async fn with_static_engine(id: u64, runs: &AtomicUsize) -> Result<u64, String> {
    Ok(runs.fetch_add(1, Ordering::SeqCst) as u64 + id)
}

fn to_text(error: Error) -> String {
    format!("refused: {error}")
}

#[idempotent(key = id, store = store)]
async fn with_shared_store(
    store: Arc<MemoryStore>,
    id: u64,
    runs: &AtomicUsize,
) -> Result<u64, AppError> {
    Ok(runs.fetch_add(1, Ordering::SeqCst) as u64 + id)
}

#[tokio::test]
async fn statics_map_err_and_shared_stores() {
    let runs = AtomicUsize::new(0);
    let id = 1_000 + u64::from(std::process::id());
    assert_eq!(with_static_engine(id, &runs).await, Ok(id));
    assert_eq!(with_static_engine(id, &runs).await, Ok(id));
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    let store = Arc::new(MemoryStore::new());
    let runs = AtomicUsize::new(0);
    assert_eq!(with_shared_store(Arc::clone(&store), 5, &runs).await, Ok(5));
    assert_eq!(with_shared_store(Arc::clone(&store), 5, &runs).await, Ok(5));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[idempotent(key = key, store = engine)]
async fn empty_key_refused(engine: &Idempotency<MemoryStore>, key: &str) -> Result<(), AppError> {
    Ok(())
}

#[tokio::test]
async fn an_empty_key_is_refused_without_running() {
    let engine = Idempotency::new(MemoryStore::new());
    assert!(matches!(
        empty_key_refused(&engine, "").await,
        Err(AppError::Other(message)) if message.contains("empty")
    ));
}

#[idempotent(key = job, store = engine, namespace = "D")]
async fn slow_job(
    engine: &Idempotency<MemoryStore>,
    job: &str,
    started: &Notify,
    runs: &AtomicUsize,
) -> Result<(), AppError> {
    runs.fetch_add(1, Ordering::SeqCst);
    started.notify_one();
    std::future::pending::<()>().await;
    Ok(())
}

#[tokio::test]
async fn a_dropped_call_releases_its_key() {
    let engine = Idempotency::new(MemoryStore::new());
    let (started, runs) = (Notify::new(), AtomicUsize::new(0));
    tokio::select! {
        _ = slow_job(&engine, "D1", &started, &runs) => unreachable!("the job never finishes"),
        () = started.notified() => {}
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // The release runs in the background: retry until it lands (bounded).
    let mut outcome = Err(AppError::InFlight);
    for _ in 0..200 {
        outcome = quick_job_in(&engine, "D1", &runs).await;
        if outcome != Err(AppError::InFlight) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(outcome, Ok(()));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

/// `quick_job` in the namespace of `slow_job`.
#[idempotent(key = job, store = engine, namespace = "D")]
async fn quick_job_in(
    engine: &Idempotency<MemoryStore>,
    job: &str,
    runs: &AtomicUsize,
) -> Result<(), AppError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(())
}
