//! Failures of the admin API as JSON answers.

use axum::Json;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use idempotency_core::StoreError;

/// A failed admin request: its status and message.
pub(super) struct ApiError(pub(super) StatusCode, pub(super) String);

impl ApiError {
    /// A bad request.
    pub(super) fn bad(message: impl Into<String>) -> Self {
        Self(StatusCode::BAD_REQUEST, message.into())
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        let status = match error {
            StoreError::Unavailable(_) | StoreError::Timeout(_) => StatusCode::SERVICE_UNAVAILABLE,
            StoreError::Config(_) | StoreError::Key(_) => StatusCode::BAD_REQUEST,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self(status, error.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(serde_json::json!({ "error": self.1 }))).into_response()
    }
}
