//! The payment provider the checkout captures with: a small service of its own (binary
//! `provider`) that deduplicates on the `Idempotency-Key` it receives, as a real provider does.
//!
//! - `POST /captures` with `Idempotency-Key` and `{"order_id": 1, "amount": 1299}` captures
//!   once: 201 `{"capture_id": "cap_…", "order_id": 1, "amount": 1299}`. The same key again
//!   answers the same capture (201, `Idempotent-Replayed: true`); the same key with another
//!   body is a 422; a missing or invalid key a 400.
//! - `GET /captures?order_id=N` answers `{"captures": <distinct captures of order N>,
//!   "capture_ids": [...]}`: what the drills check "exactly one capture" against.
//!
//! The ledger lives in memory ([`Provider`]); a restarted provider forgets it. The drills
//! restart the payments service, never the provider.
//!
//! Test hook: [`DECLINE_ORDER`] (`PROVIDER_DECLINE_ORDER=<order id>`) declines every capture of
//! that order with 402 (card declined), replayed like a capture for the same key.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::client::{ClientError, get, send_once};
use super::problem::Problem;

/// The environment variable of the provider's address, read by the provider (where it listens)
/// and by the payments service (where it captures).
pub const PROVIDER_ADDR: &str = "PROVIDER_ADDR";

/// Where the provider listens without [`PROVIDER_ADDR`].
pub const DEFAULT_PROVIDER_ADDR: &str = "127.0.0.1:3100";

/// The environment variable of the drills' declined order: every capture of that order id is
/// answered 402.
pub const DECLINE_ORDER: &str = "PROVIDER_DECLINE_ORDER";

/// The header of the caller's key.
const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The header a replayed answer carries.
const REPLAYED: &str = "idempotent-replayed";

/// The longest key accepted.
const MAX_KEY_LEN: usize = 255;

/// [`PROVIDER_ADDR`], or [`DEFAULT_PROVIDER_ADDR`] without it.
pub fn addr_from_env() -> String {
    std::env::var(PROVIDER_ADDR).unwrap_or_else(|_| DEFAULT_PROVIDER_ADDR.to_owned())
}

/// The body of `POST /captures`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureRequest {
    /// The order the money is captured for.
    pub order_id: i64,
    /// The amount, in cents.
    pub amount: i64,
}

/// A capture, as `POST /captures` answers it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capture {
    /// The provider's id of the capture: `cap_` and 24 hex digits.
    pub capture_id: String,
    /// The order it captured for.
    pub order_id: i64,
    /// The amount captured, in cents.
    pub amount: i64,
}

/// The body of `GET /captures?order_id=N`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Captures {
    /// How many distinct captures the order has (one per key that captured).
    pub captures: u64,
    /// Their ids, oldest first.
    #[serde(default)]
    pub capture_ids: Vec<String>,
}

/// The query of `GET /captures`.
#[derive(Clone, Copy, Debug, Deserialize)]
struct ByOrder {
    order_id: i64,
}

/// What a key got the first time, answered again to every retry with the same body.
#[derive(Clone, Debug)]
enum Outcome {
    Captured(Capture),
    Declined,
}

/// The ledger: outcomes by key (with the body they answered), captures by order.
#[derive(Debug, Default)]
struct Ledger {
    by_key: HashMap<String, (CaptureRequest, Outcome)>,
    by_order: HashMap<i64, Vec<String>>,
}

/// The provider: its in-memory ledger and its test hooks. Clones share the ledger.
#[derive(Clone, Debug)]
pub struct Provider {
    ledger: Arc<Mutex<Ledger>>,
    decline: Option<i64>,
    /// What makes capture ids unique across restarts: the start time and the process id.
    seed: [u8; 16],
    issued: Arc<AtomicU64>,
}

impl Default for Provider {
    fn default() -> Self {
        Self::new()
    }
}

impl Provider {
    /// A provider with an empty ledger that captures every order.
    pub fn new() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos());
        let mut seed = [0u8; 16];
        seed.copy_from_slice(&(nanos ^ u128::from(std::process::id())).to_le_bytes());
        Self {
            ledger: Arc::default(),
            decline: None,
            seed,
            issued: Arc::default(),
        }
    }

    /// The same provider, declining (402) every capture of `order_id`.
    pub fn declining(mut self, order_id: i64) -> Self {
        self.decline = Some(order_id);
        self
    }

    /// A provider from the environment: [`DECLINE_ORDER`], if set, must be an order id.
    pub fn from_env() -> Result<Self, String> {
        let provider = Self::new();
        match std::env::var(DECLINE_ORDER) {
            Err(_) => Ok(provider),
            Ok(value) => value
                .trim()
                .parse::<i64>()
                .map(|order_id| provider.declining(order_id))
                .map_err(|_| format!("{DECLINE_ORDER} must be an order id, got {value:?}")),
        }
    }

    /// The routes: `POST /captures` and `GET /captures?order_id=N`.
    pub fn router(self) -> Router {
        Router::new()
            .route("/captures", post(capture).get(captures))
            .with_state(self)
    }

    /// The distinct captures of `order_id`, oldest first.
    pub fn captures_of(&self, order_id: i64) -> Vec<String> {
        self.ledger()
            .by_order
            .get(&order_id)
            .cloned()
            .unwrap_or_default()
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        // A panic while holding the lock leaves a consistent map (every update is one insert).
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn next_capture_id(&self) -> String {
        let issued = self.issued.fetch_add(1, Ordering::Relaxed);
        let digest = Sha256::new()
            .chain_update(self.seed)
            .chain_update(issued.to_le_bytes())
            .finalize();
        format!("cap_{}", hex::encode(&digest[..12]))
    }
}

/// The caller's key: required, visible ASCII, at most 255 characters.
fn idempotency_key(headers: &HeaderMap) -> Result<String, Problem> {
    let value = headers.get(IDEMPOTENCY_KEY).ok_or_else(|| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "Idempotency-Key Missing",
            "POST /captures requires an Idempotency-Key header",
        )
    })?;
    let invalid = |why: &str| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "Idempotency-Key Invalid",
            format!("the Idempotency-Key {why}"),
        )
    };
    let key = value
        .to_str()
        .map_err(|_| invalid("must be visible ASCII"))?
        .trim();
    if key.is_empty() {
        return Err(invalid("is empty"));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(invalid("is longer than 255 characters"));
    }
    if !key.bytes().all(|byte| byte.is_ascii_graphic()) {
        return Err(invalid("must be visible ASCII without spaces"));
    }
    Ok(key.to_owned())
}

fn declined(order_id: i64) -> Problem {
    Problem::new(
        StatusCode::PAYMENT_REQUIRED,
        "Card Declined",
        format!("the card of order {order_id} was declined"),
    )
}

/// The answer to an outcome, marked replayed when it is not the first.
fn answer(request: CaptureRequest, outcome: Outcome, replayed: bool) -> Response {
    let mut response = match outcome {
        Outcome::Captured(capture) => (StatusCode::CREATED, Json(capture)).into_response(),
        Outcome::Declined => declined(request.order_id).into_response(),
    };
    if replayed {
        response
            .headers_mut()
            .insert(REPLAYED, HeaderValue::from_static("true"));
    }
    response
}

/// `POST /captures`: one capture per key.
async fn capture(
    State(provider): State<Provider>,
    headers: HeaderMap,
    body: Result<Json<CaptureRequest>, JsonRejection>,
) -> Result<Response, Problem> {
    let key = idempotency_key(&headers)?;
    let Json(request) = body?;
    let mut ledger = provider.ledger();
    if let Some((first, outcome)) = ledger.by_key.get(&key) {
        if *first != request {
            return Err(Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Idempotency-Key Reused",
                format!(
                    "the key {key:?} was used for order {} amount {}, not order {} amount {}",
                    first.order_id, first.amount, request.order_id, request.amount
                ),
            ));
        }
        tracing::info!(%key, order_id = request.order_id, "capture replayed");
        return Ok(answer(request, outcome.clone(), true));
    }
    let outcome = if provider.decline == Some(request.order_id) {
        tracing::info!(%key, order_id = request.order_id, "capture declined");
        Outcome::Declined
    } else {
        let capture = Capture {
            capture_id: provider.next_capture_id(),
            order_id: request.order_id,
            amount: request.amount,
        };
        tracing::info!(%key, order_id = request.order_id, capture_id = %capture.capture_id, "captured");
        ledger
            .by_order
            .entry(request.order_id)
            .or_default()
            .push(capture.capture_id.clone());
        Outcome::Captured(capture)
    };
    ledger.by_key.insert(key, (request, outcome.clone()));
    Ok(answer(request, outcome, false))
}

/// `GET /captures?order_id=N`: the order's distinct captures.
async fn captures(
    State(provider): State<Provider>,
    query: Result<Query<ByOrder>, QueryRejection>,
) -> Result<Json<Captures>, Problem> {
    let Query(ByOrder { order_id }) = query.map_err(|rejection| {
        Problem::new(rejection.status(), "Bad Request", rejection.body_text())
    })?;
    let capture_ids = provider.captures_of(order_id);
    Ok(Json(Captures {
        captures: u64::try_from(capture_ids.len()).unwrap_or(u64::MAX),
        capture_ids,
    }))
}

/// `GET /captures?order_id={order_id}` on the provider at `addr`.
pub async fn captures_at(addr: SocketAddr, order_id: i64) -> Result<Captures, ClientError> {
    let reply = send_once(addr, get(&format!("/captures?order_id={order_id}"))?).await?;
    Ok(reply.expect_status(StatusCode::OK)?.json()?)
}
