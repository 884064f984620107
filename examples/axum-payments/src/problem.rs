//! Errors as RFC 9457 problem details (`application/problem+json`).

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::repo::RepoError;

/// An error answer: a status, a short title and a detail, sent as problem+json.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The HTTP status.
    pub status: StatusCode,
    /// A short, fixed summary of the problem type.
    pub title: &'static str,
    /// What happened to this request.
    pub detail: String,
}

impl Problem {
    /// A problem with a status, title and detail.
    pub fn new(status: StatusCode, title: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            title,
            detail: detail.into(),
        }
    }

    /// 404: the order (or other resource) does not exist.
    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "Not Found", detail)
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = json!({
            "type": "about:blank",
            "title": self.title,
            "status": self.status.as_u16(),
            "detail": self.detail,
        });
        let mut response = (self.status, Json(body)).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        response
    }
}

/// Unreadable JSON is a 400, well-formed JSON of the wrong shape a 422, a wrong content type a 415.
impl From<JsonRejection> for Problem {
    fn from(rejection: JsonRejection) -> Self {
        let title = match rejection {
            JsonRejection::JsonDataError(_) => "Unprocessable Content",
            JsonRejection::MissingJsonContentType(_) => "Unsupported Media Type",
            _ => "Bad Request",
        };
        Self::new(rejection.status(), title, rejection.body_text())
    }
}

impl From<PathRejection> for Problem {
    fn from(rejection: PathRejection) -> Self {
        Self::new(rejection.status(), "Bad Request", rejection.body_text())
    }
}

/// The repository failed: 503, so the caller (and the idempotency layer, which does not store
/// 5xx) lets the request be retried.
impl From<RepoError> for Problem {
    fn from(error: RepoError) -> Self {
        tracing::error!(%error, "payments repository failed");
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "Service Unavailable",
            error.to_string(),
        )
    }
}
