//! The incident fixed with `#[idempotent]`: a payment provider retries its "paid" callback
//! six times; the coupon is granted once and every retry gets the same answer.
//!
//! Run: `cargo run -p idempotency-macros --example axum_callback`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::body::Body;
use axum::extract::{Json, State};
use axum::http::{Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use idempotency_core::{Error, Idempotency, MemoryStore};
use idempotency_function::idempotent;
use serde::{Deserialize, Serialize};
use tower::ServiceExt;

#[derive(Clone)]
struct App {
    idempotency: Idempotency<MemoryStore>,
    coupons: Arc<AtomicU64>,
}

/// The provider's notification.
#[derive(Deserialize, Serialize)]
struct PaidCallback {
    trade_no: String,
    order_id: u64,
    amount_cents: u64,
}

/// The handler's errors, and their status codes.
enum CallbackError {
    Busy,
    Conflict,
    Unavailable,
}

impl From<Error> for CallbackError {
    fn from(error: Error) -> Self {
        match error {
            Error::InFlight { .. } => Self::Busy,
            Error::Mismatch => Self::Conflict,
            _ => Self::Unavailable,
        }
    }
}

impl IntoResponse for CallbackError {
    fn into_response(self) -> Response {
        match self {
            Self::Busy => StatusCode::CONFLICT,
            Self::Conflict => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
        .into_response()
    }
}

/// Runs once per `trade_no`; a retry gets the stored "success" without granting again.
#[idempotent(key = callback.trade_no, store = app.idempotency, namespace = "pay.callback",
             fingerprint = [callback.order_id, callback.amount_cents], ttl = "7d")]
async fn paid(
    State(app): State<App>,
    Json(callback): Json<PaidCallback>,
) -> Result<String, CallbackError> {
    let coupon = app.coupons.fetch_add(1, Ordering::SeqCst) + 1;
    Ok(format!(
        "success (coupon {coupon} for order {})",
        callback.order_id
    ))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let app = App {
        idempotency: Idempotency::new(MemoryStore::new()),
        coupons: Arc::new(AtomicU64::new(0)),
    };
    let router = Router::new()
        .route("/pay/callback", post(paid))
        .with_state(app.clone());
    let body = r#"{"trade_no":"T-20240101-0001","order_id":42,"amount_cents":9900}"#;
    for attempt in 1..=6 {
        let request = Request::post("/pay/callback")
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap();
        let response = router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let text = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        println!(
            "callback {attempt}: {status} {}",
            String::from_utf8_lossy(&text)
        );
        assert_eq!(status, StatusCode::OK);
    }
    assert_eq!(
        app.coupons.load(Ordering::SeqCst),
        1,
        "one coupon for six callbacks"
    );
    println!("coupons granted: 1");
}
