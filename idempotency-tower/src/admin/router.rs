//! The admin API's router: its endpoints, the operator check in front of them, and the answer
//! to a path that names none.

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use http::request::Parts;
use idempotency_operations::Admin;

use super::requests::Operator;
use super::{actions, auth, error, reads};

/// The admin API's router over `admin` (see the [module docs](super)), for an operator an
/// outer auth layer inserts as a request extension: every request without one is answered
/// 401.
pub fn admin_router(admin: Admin) -> Router {
    guarded(admin, None)
}

/// The admin API's router over `admin`, whose requests `verify` authenticates from their head
/// (a bearer token, a client identity an outer layer recorded): the [`Operator`] it returns
/// acts; `None` is answered 401. An [`Operator`] extension an outer layer inserted is taken
/// as it is.
pub fn admin_router_verified<V>(admin: Admin, verify: V) -> Router
where
    V: Fn(&Parts) -> Option<Operator> + Send + Sync + 'static,
{
    guarded(admin, Some(Arc::new(verify)))
}

fn guarded(admin: Admin, verifier: Option<auth::Verifier>) -> Router {
    Router::new()
        .route("/stuck", get(reads::stuck))
        .route("/records", get(reads::records))
        .route("/stats", get(reads::stats))
        .route("/inspect", post(reads::inspect))
        .route("/reconcile", post(reads::reconcile))
        .route("/release", post(actions::release))
        .route("/complete", post(actions::complete))
        .route("/delete", post(actions::delete))
        .route("/resume", post(actions::resume))
        .route("/purge", post(actions::purge))
        .fallback(no_such_endpoint)
        .with_state(admin)
        .layer(axum::middleware::from_fn_with_state(
            verifier,
            auth::require_operator,
        ))
}

/// 404 problem+json for a path under the router that names no endpoint (to operators only:
/// strangers get 401 whatever the path).
async fn no_such_endpoint() -> error::ApiError {
    error::ApiError(
        http::StatusCode::NOT_FOUND,
        "no such admin endpoint".to_owned(),
    )
}
