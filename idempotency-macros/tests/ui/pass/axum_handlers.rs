//! An axum payment callback with `#[axum::debug_handler]` stacked on either side.
use axum::extract::{Json, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use idempotency_core::{Idempotency, Error, MemoryStore};
use idempotency_function::idempotent;
use serde::{Deserialize, Serialize};

#[derive(Clone)]
struct App {
    idempotency: Idempotency<MemoryStore>,
}

#[derive(Deserialize, Serialize)]
struct Callback {
    trade_no: String,
    amount: u64,
}

struct AppError(StatusCode);

impl From<Error> for AppError {
    fn from(error: Error) -> Self {
        Self(match error {
            Error::InFlight { .. } => StatusCode::CONFLICT,
            Error::Mismatch => StatusCode::UNPROCESSABLE_ENTITY,
            _ => StatusCode::SERVICE_UNAVAILABLE,
        })
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        self.0.into_response()
    }
}

#[axum::debug_handler]
#[idempotent(key = callback.trade_no, store = app.idempotency, namespace = "pay.callback", fingerprint = [callback])]
async fn outer_debug_handler(
    State(app): State<App>,
    Json(callback): Json<Callback>,
) -> Result<String, AppError> {
    Ok(format!("success {}", callback.amount))
}

#[idempotent(key = callback.trade_no, store = app.idempotency, namespace = "pay.callback2")]
#[axum::debug_handler]
async fn inner_debug_handler(
    State(app): State<App>,
    Json(callback): Json<Callback>,
) -> Result<String, AppError> {
    Ok(format!("success {}", callback.amount))
}

fn main() {
    let app = App {
        idempotency: Idempotency::new(MemoryStore::new()),
    };
    let _router: Router = Router::new()
        .route("/a", post(outer_debug_handler))
        .route("/b", post(inner_debug_handler))
        .with_state(app);
}
