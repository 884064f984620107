//! `POST /checkout`: a handler with several steps, driven to completion by retries and the
//! completer (`idempotency_tower::steps`). `reserve` marks the order in the business database,
//! `capture` calls the payment provider over HTTP with a downstream key, `grant` grants the
//! coupon; then 201 with the capture id and the coupon id. A crash at any point resumes after
//! the last completed step; a declined card (402) undoes the reservation.
//!
//! Drill hook: with `CRASH_AFTER=<step>` the process exits abruptly right after that step's
//! checkpoint is committed, before the next step starts.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use http::header::CONTENT_TYPE;
use http_body_util::Full;
use idempotency_sql::StepStore;
use idempotency_steps::{Run, StepError};
use idempotency_tower::steps::Steps;
use serde::{Deserialize, Serialize};

use super::client::send_once;
use super::problem::Problem;
use super::provider::{Capture, CaptureRequest};
use super::sql::{Reserved, SqlPayments};

/// Namespace of `POST /checkout` keys.
pub const CHECKOUT_NAMESPACE: &str = "payments.checkout";

/// How often the completer looks for checkouts nobody retries, without
/// `COMPLETER_INTERVAL_MS`: a checkout whose process died is finished within this (plus its
/// own steps) even if its client never comes back.
pub const DEFAULT_COMPLETER_INTERVAL_MS: u64 = 5_000;

/// The body of `POST /checkout`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct CheckoutRequest {
    /// The order to check out (created with `POST /orders`, still `WAIT_PAY`).
    pub order_id: i64,
}

/// The answer of `POST /checkout` (201).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkout {
    /// The order.
    pub order_id: i64,
    /// The provider's capture.
    pub capture_id: String,
    /// The coupon granted.
    pub coupon_id: i64,
}

/// What the checkout handler shares: the repository's writes on a step's connection, the
/// provider's address and the drill's crash point.
pub(crate) struct CheckoutState<DB: sqlx::Database> {
    pub(crate) sql: Arc<dyn SqlPayments<DB>>,
    pub(crate) provider: SocketAddr,
    pub(crate) crash_after: Option<String>,
}

impl<DB: sqlx::Database> Clone for CheckoutState<DB> {
    fn clone(&self) -> Self {
        Self {
            sql: Arc::clone(&self.sql),
            provider: self.provider,
            crash_after: self.crash_after.clone(),
        }
    }
}

impl<DB: sqlx::Database> CheckoutState<DB> {
    /// The drill's crash: once `step` has committed, exits at once, as a killed process would
    /// (no answer, no cleanup). A local step commits with the next step or the answer, so the
    /// drill commits it first.
    async fn crash_point<S: StepStore>(&self, run: &mut Run<S>, step: &str) -> Result<(), Problem> {
        if self.crash_after.as_deref() == Some(step) {
            run.commit().await.map_err(problem)?;
            tracing::warn!(step, "drill: CRASH_AFTER reached, exiting abruptly");
            std::process::exit(137);
        }
        Ok(())
    }
}

/// `POST /checkout`: reserve, capture, grant, each once whatever crashes in between.
pub(crate) async fn checkout<S>(
    State(state): State<CheckoutState<S::Database>>,
    mut run: Steps<S>,
    body: Result<Json<CheckoutRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<Checkout>), Problem>
where
    S: StepStore,
{
    let Json(CheckoutRequest { order_id }) = body?;
    let sql = Arc::clone(&state.sql);
    let reserved: Reserved = run
        .local("reserve", async |tx| {
            let reserved = sql
                .reserve_on(&mut **tx, order_id)
                .await
                .map_err(StepError::retry)?;
            reserved.ok_or_else(|| {
                StepError::end(refusal(StatusCode::CONFLICT, "order not reservable"))
            })
        })
        .await
        .map_err(problem)?;
    let undo = Arc::clone(&state.sql);
    run.undo(
        "reserve",
        Box::new(move |conn, _| {
            Box::pin(async move {
                undo.unreserve_on(conn, order_id)
                    .await
                    .map_err(StepError::retry)
            })
        }),
    );
    state.crash_point(&mut run, "reserve").await?;
    let capture: Capture = run
        .foreign("capture", async |key| {
            capture_at(state.provider, key, &reserved).await
        })
        .await
        .map_err(problem)?;
    state.crash_point(&mut run, "capture").await?;
    let coupon_id: i64 = run
        .local("grant", async |tx| {
            sql.grant_on(&mut **tx, &reserved, &capture.capture_id)
                .await
                .map_err(StepError::retry)
        })
        .await
        .map_err(problem)?;
    state.crash_point(&mut run, "grant").await?;
    Ok((
        StatusCode::CREATED,
        Json(Checkout {
            order_id,
            capture_id: capture.capture_id,
            coupon_id,
        }),
    ))
}

/// Captures `reserved`'s amount at the provider with the step's downstream key: a call made
/// again after a crash carries the same key, and the provider answers the same capture.
async fn capture_at(
    provider: SocketAddr,
    key: &str,
    reserved: &Reserved,
) -> Result<Capture, StepError> {
    let body = CaptureRequest {
        order_id: reserved.order_id,
        amount: reserved.amount_cents,
    };
    let request = http::Request::post("/captures")
        .header("idempotency-key", key)
        .header(CONTENT_TYPE, "application/json")
        .body(Full::new(bytes::Bytes::from(
            serde_json::to_vec(&body).map_err(StepError::retry)?,
        )))
        .map_err(StepError::retry)?;
    let reply = send_once(provider, request)
        .await
        .map_err(|error| StepError::retry(format!("the provider is unreachable: {error}")))?;
    match reply.status {
        status if status.is_success() => reply.json().map_err(StepError::retry),
        StatusCode::PAYMENT_REQUIRED => Err(StepError::end(refusal(
            StatusCode::PAYMENT_REQUIRED,
            "card declined",
        ))),
        status => Err(StepError::retry(format!("the provider answered {status}"))),
    }
}

/// A step's ending answer: a status and a title.
fn refusal(status: StatusCode, title: &str) -> serde_json::Value {
    serde_json::json!({ "status": status.as_u16(), "title": title })
}

/// The answer of a failed step: its ending's status (stored), or 503 (the run stays
/// resumable; the client retries, or the completer does).
fn problem(error: StepError) -> Problem {
    match error {
        StepError::End(answer) => {
            let status = answer["status"]
                .as_u64()
                .and_then(|status| u16::try_from(status).ok())
                .and_then(|status| StatusCode::from_u16(status).ok())
                .unwrap_or(StatusCode::UNPROCESSABLE_ENTITY);
            let title = answer["title"]
                .as_str()
                .unwrap_or("checkout refused")
                .to_owned();
            Problem::new(status, "Checkout refused", title)
        }
        error => Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "Service Unavailable",
            format!("the checkout will be finished: {error}"),
        ),
    }
}
