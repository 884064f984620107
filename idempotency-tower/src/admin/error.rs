//! Failures of the admin API as RFC 9457 problem+json answers.

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

/// An RFC 9457 `application/problem+json` answer of `status`: `title` its reason phrase,
/// `detail` what went wrong, and `extra` members beside them.
pub(super) fn problem(status: StatusCode, detail: &str, extra: serde_json::Value) -> Response {
    let mut body = serde_json::json!({
        "type": "about:blank",
        "title": status.canonical_reason().unwrap_or("Error"),
        "status": status.as_u16(),
        "detail": detail,
    });
    if let (Some(body), serde_json::Value::Object(extra)) = (body.as_object_mut(), extra) {
        body.extend(extra);
    }
    let mut response = (status, Json(body)).into_response();
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/problem+json"),
    );
    response
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        problem(self.0, &self.1, serde_json::Value::Null)
    }
}
