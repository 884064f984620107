//! Who may call the admin router: an authenticated operator, from an outer auth layer's
//! request extension or the router's own verifier; anyone else gets 401.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::request::Parts;
use http::{HeaderValue, StatusCode, header};

use super::error::ApiError;
use super::requests::Operator;

/// Tells the operator a request authenticates, from its head (a bearer token, a client
/// certificate's identity an outer layer recorded, …): `None` refuses it.
pub(super) type Verifier = Arc<dyn Fn(&Parts) -> Option<Operator> + Send + Sync>;

/// Passes a request on with its [`Operator`]: the one an outer layer inserted, else the one
/// `verifier` finds; answers 401 (problem+json, nothing run) when there is none.
pub(super) async fn require_operator(
    State(verifier): State<Option<Verifier>>,
    request: Request,
    next: Next,
) -> Response {
    let (mut parts, body) = request.into_parts();
    let operator = match parts.extensions.get::<Operator>() {
        Some(operator) => Some(operator.clone()),
        None => verifier.as_ref().and_then(|verify| verify(&parts)),
    };
    match operator {
        Some(operator) if !operator.0.is_empty() => {
            parts.extensions.insert(operator);
            next.run(Request::from_parts(parts, body)).await
        }
        _ => {
            let mut refusal = ApiError(
                StatusCode::UNAUTHORIZED,
                "the admin API answers authenticated operators only".to_owned(),
            )
            .into_response();
            refusal.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"idempotency-admin\""),
            );
            refusal
        }
    }
}
