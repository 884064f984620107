//! The admin API's actions: release, complete, delete (fenced by the record as listed) and
//! purge; each audited with who acts.

use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use bytes::Bytes;
use http::StatusCode;
use idempotency_core::{Outcome, StorageKey};
use idempotency_operations::{Acted, Actor, Admin, Archive, Cursor, Fence, Step};
use serde::Deserialize;
use serde_json::json;

use super::error::{ApiError, problem};
use super::requests::{FenceBody, Operator, Target, actor};
use crate::StoredResponse;

/// What every action on one record carries.
#[derive(Deserialize)]
pub(super) struct OnRecord {
    #[serde(flatten)]
    target: Target,
    fence: FenceBody,
    actor: Option<String>,
    #[serde(default)]
    reason: String,
}

impl OnRecord {
    /// Who acts (the authenticated [`Operator`]), on which record, fenced by what: how every
    /// action on one record starts.
    async fn resolve(
        &self,
        operator: &Operator,
        admin: &Admin,
    ) -> Result<(Actor, StorageKey, Fence), ApiError> {
        let who = actor(operator, self.actor.as_deref(), &self.reason)?;
        let key = self.target.storage_key(admin).await?;
        Ok((who, key, self.fence.fence()))
    }
}

/// `200 {"applied": true}`, or `409` problem+json with the refusal (`absent`, `moved_on`,
/// `not_in_progress`) and never the record as it is now: its fence would let a caller act on
/// a record it never listed.
fn answer(acted: Acted) -> Response {
    match acted {
        Acted::Applied => Json(json!({ "applied": true })).into_response(),
        Acted::Refused { refusal, .. } => problem(
            StatusCode::CONFLICT,
            "the record is not the one listed: list it again before acting",
            json!({ "applied": false, "refusal": refusal.as_str() }),
        ),
    }
}

/// `POST /release`.
pub(super) async fn release(
    State(admin): State<Admin>,
    Extension(operator): Extension<Operator>,
    Json(request): Json<OnRecord>,
) -> Result<Response, ApiError> {
    let (who, key, fence) = request.resolve(&operator, &admin).await?;
    Ok(answer(admin.act(&key, fence, &who, Step::Release).await?))
}

/// `POST /resume`: a run with steps resumable at once (its lease ended, its attempts from 1).
pub(super) async fn resume(
    State(admin): State<Admin>,
    Extension(operator): Extension<Operator>,
    Json(request): Json<OnRecord>,
) -> Result<Response, ApiError> {
    let (who, key, fence) = request.resolve(&operator, &admin).await?;
    Ok(answer(admin.act(&key, fence, &who, Step::Resume).await?))
}

/// `POST /delete`.
pub(super) async fn delete(
    State(admin): State<Admin>,
    Extension(operator): Extension<Operator>,
    Json(request): Json<OnRecord>,
) -> Result<Response, ApiError> {
    let (who, key, fence) = request.resolve(&operator, &admin).await?;
    Ok(answer(admin.act(&key, fence, &who, Step::Delete).await?))
}

/// `POST /complete`: the record's outcome by hand.
#[derive(Deserialize)]
pub(super) struct Complete {
    #[serde(flatten)]
    on: OnRecord,
    status: u16,
    #[serde(default)]
    body: String,
    encoding: Option<String>,
    ttl_ms: Option<u64>,
}

/// The outcome as the front end stores it: `http` (default) a response the layer replays,
/// `raw` the bytes as given.
fn outcome(status: u16, body: String, encoding: Option<&str>) -> Result<Outcome, ApiError> {
    match encoding.unwrap_or("http") {
        "raw" => Ok(Outcome::new(status, body)),
        "http" => {
            let code = StatusCode::from_u16(status)
                .map_err(|_| ApiError::bad(format!("status {status} is no HTTP status")))?;
            let mut headers = http::HeaderMap::new();
            if serde_json::from_str::<serde_json::Value>(&body).is_ok() {
                headers.insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/json"),
                );
            }
            let response = StoredResponse {
                status: code,
                headers,
                body: Bytes::from(body),
                trailers: None,
            };
            Ok(Outcome::new(status, response.encode()))
        }
        other => Err(ApiError::bad(format!("encoding {other:?}: http or raw"))),
    }
}

pub(super) async fn complete(
    State(admin): State<Admin>,
    Extension(operator): Extension<Operator>,
    Json(request): Json<Complete>,
) -> Result<Response, ApiError> {
    let (who, key, fence) = request.on.resolve(&operator, &admin).await?;
    let outcome = outcome(request.status, request.body, request.encoding.as_deref())?;
    let ttl = Duration::from_millis(request.ttl_ms.unwrap_or(24 * 60 * 60 * 1000));
    Ok(answer(
        admin
            .act(&key, fence, &who, Step::Complete(&outcome, ttl))
            .await?,
    ))
}

/// `POST /purge`: at most `max_batches` batches, resumable at `next_cursor`.
#[derive(Deserialize)]
pub(super) struct Purge {
    namespace: Option<String>,
    cursor: Option<String>,
    max_batches: Option<u64>,
    archive_table: Option<String>,
    actor: Option<String>,
    #[serde(default)]
    reason: String,
}

pub(super) async fn purge(
    State(admin): State<Admin>,
    Extension(operator): Extension<Operator>,
    Json(request): Json<Purge>,
) -> Result<Response, ApiError> {
    let who = actor(&operator, request.actor.as_deref(), &request.reason)?;
    let mut archive = request.archive_table.map_or(Archive::None, Archive::Table);
    let from = request.cursor.map(Cursor::from_text).unwrap_or_default();
    let report = admin
        .purge_batches(
            request.namespace.as_deref(),
            &mut archive,
            from,
            request.max_batches.unwrap_or(10).max(1),
            &who,
            &mut |_| {},
        )
        .await?;
    Ok(Json(json!({
        "purged": report.purged,
        "examined": report.examined,
        "batches": report.batches,
        "next_cursor": report.next.map(|next| next.to_string()),
    }))
    .into_response())
}
