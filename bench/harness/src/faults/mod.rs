//! The fault harness: the HTTP layer over a real store whose link (or server) fails mid-run,
//! under load, and a checker of what every client saw.
//!
//! A run: 16 clients send fresh keys to `POST /pay` (each key retried, 50 ms apart, until it
//! succeeds), healthy for a while, then through the fault, then after it; at the end every key
//! is sent once more and must replay. The handler notes each execution (the business effect);
//! [`checker`] proves per key: at most one execution, every success backed by exactly one,
//! every refused key run after recovery, no 409 without an owner more than a second after the
//! fault was lifted, no answer slower than the store timeout plus a second.
//!
//! `cargo run -p idempotency-bench --features redis,postgres,mysql,sqlite --bin fault_harness`
//! prints the table of every backend and fault; `tests/faults_at_the_wire.rs` asserts it.

pub mod checker;
mod rigs;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::routing::post;
use idempotency_core::Store;
use idempotency_tower::IdempotencyLayer;
use tower::ServiceExt;

pub use checker::{Log, Report};
pub use rigs::{Backend, Fault};

/// How long each phase of a run lasts.
#[derive(Clone, Copy, Debug)]
pub struct Timeline {
    /// Load before the fault.
    pub healthy: Duration,
    /// The fault.
    pub outage: Duration,
    /// Load with fresh keys after the fault is lifted.
    pub after: Duration,
    /// How long refused keys are still retried once fresh keys stop.
    pub settle: Duration,
}

impl Default for Timeline {
    fn default() -> Self {
        Self {
            healthy: Duration::from_secs(1),
            outage: Duration::from_secs(3),
            after: Duration::from_secs(2),
            settle: Duration::from_secs(8),
        }
    }
}

/// The clients sending at once.
pub const CLIENTS: usize = 16;
/// The pause between two attempts of one key.
const RETRY_PAUSE: Duration = Duration::from_millis(50);
/// The pause between two fresh keys of one client.
const NEXT_KEY_PAUSE: Duration = Duration::from_millis(10);

/// Why a run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum Unavailable {
    /// A server or binary the run needs is missing.
    #[error("{0}")]
    Missing(String),
    /// The fault could not be brought about or lifted.
    #[error("{0}")]
    Failed(String),
}

/// Runs `fault` on `backend` along `timeline`; the checker's report, or why it could not run.
pub async fn run(
    backend: Backend,
    fault: Fault,
    timeline: Timeline,
) -> Result<Report, Unavailable> {
    let log = Arc::new(Log::default());
    let mut rig = rigs::Rig::start(backend, fault, Arc::clone(&log)).await?;
    let app = rig.app().clone();
    let started = Instant::now();
    let fresh_until = timeline.healthy + timeline.outage + timeline.after;
    let retry_until = fresh_until + timeline.settle;
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (app, log) = (app.clone(), Arc::clone(&log));
            let run = rig.run_id().to_owned();
            tokio::spawn(async move {
                let mut keys = Vec::new();
                while started.elapsed() < fresh_until {
                    let key = format!("{run}-{client}-{}", keys.len());
                    while started.elapsed() < retry_until {
                        if send(&app, &log, &key, started).await == StatusCode::CREATED {
                            break;
                        }
                        tokio::time::sleep(RETRY_PAUSE).await;
                    }
                    keys.push(key);
                    tokio::time::sleep(NEXT_KEY_PAUSE).await;
                }
                keys
            })
        })
        .collect();
    tokio::time::sleep(timeline.healthy).await;
    rig.inject().await?;
    tokio::time::sleep(timeline.outage).await;
    rig.heal().await?;
    let healed_at = started.elapsed();
    let mut keys = Vec::new();
    for client in clients {
        keys.extend(client.await.unwrap_or_default());
    }
    // Every key once more: each must replay its stored outcome.
    for key in &keys {
        send(&app, &log, key, started).await;
    }
    Ok(log.report(healed_at, rig.store_timeout()))
}

/// Sends one request for `key` and logs its answer.
async fn send(app: &Router, log: &Log, key: &str, started: Instant) -> StatusCode {
    let request = Request::post("/pay")
        .header("idempotency-key", key)
        .body(Body::from("{}"))
        .unwrap_or_default();
    let sent_at = started.elapsed();
    let sent = Instant::now();
    let response = app.clone().oneshot(request).await;
    let took = sent.elapsed();
    let Ok(response) = response;
    let headers = response.headers();
    log.answered(checker::Answer {
        key: key.to_owned(),
        sent_at,
        took,
        status: response.status().as_u16(),
        replayed: headers.contains_key("idempotent-replayed"),
        retry_after: headers.contains_key("retry-after"),
    });
    response.status()
}

/// The service under test: the layer (default lease, the rig's store timeout) over a handler
/// that notes each execution.
fn app<S: Store>(store: S, namespace: &str, store_timeout: Duration, log: Arc<Log>) -> Router {
    let layer = IdempotencyLayer::builder(store)
        .shared_scope()
        .namespace(namespace)
        .store_timeout(store_timeout)
        .build();
    Router::new()
        .route("/pay", post(pay))
        .with_state(log)
        .layer(layer)
}

async fn pay(State(log): State<Arc<Log>>, headers: HeaderMap) -> StatusCode {
    let key = headers
        .get("idempotency-key")
        .and_then(|key| key.to_str().ok())
        .unwrap_or_default();
    log.effect(key);
    StatusCode::CREATED
}

/// Formats reports as the README's table.
pub fn table(rows: &[(Backend, Fault, Report)]) -> String {
    let mut out = String::from(
        "| backend | fault | requests | 201 | 409 | 503 | keys | refused keys | max runs per key | orphans after 1 s | longest answer |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for (backend, fault, report) in rows {
        let status = |code| report.statuses.get(&code).copied().unwrap_or(0);
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.2} s |\n",
            backend.name(),
            fault.describe(),
            report.requests,
            status(201),
            status(409),
            status(503),
            report.keys,
            report.refused_keys,
            report.max_executions,
            report.orphans,
            report.longest.as_secs_f64(),
        ));
    }
    out
}
