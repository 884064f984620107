//! `release`, `complete`, `delete`: one record, fenced, confirmed, audited.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use idempotency_core::{FencingToken, Outcome};
use idempotency_operations::{self as operations, Acted, Admin, Fence, RecordView};
use idempotency_tower::StoredResponse;
use serde::Serialize;

use super::resolve::Found;
use crate::args::{ActionArgs, FenceArgs};
use crate::failure::Failure;
use crate::output::{Output, age};
use crate::terminal::confirm;

/// Which action.
pub(crate) enum Step {
    /// Release an in-progress record.
    Release,
    /// Complete an in-progress record with this outcome, kept `ttl`.
    Complete {
        /// The outcome, as the front end stores it.
        outcome: Outcome,
        /// How long it is kept.
        ttl: Duration,
    },
    /// Delete a record.
    Delete,
    /// Resume an in-progress run.
    Resume,
}

impl Step {
    fn verb(&self) -> &'static str {
        match self {
            Self::Release => "release",
            Self::Complete { .. } => "complete",
            Self::Delete => "delete",
            Self::Resume => "resume",
        }
    }
}

/// The outcome of `complete`: `http` stores a response the HTTP layer replays (JSON if the
/// body parses as JSON, text otherwise), `raw` the bytes as given.
pub(crate) fn outcome(status: u16, body: &str, encoding: &str) -> Result<Outcome, Failure> {
    match encoding {
        "raw" => Ok(Outcome::new(status, Bytes::from(body.to_owned()))),
        "http" => {
            let code = http::StatusCode::from_u16(status)
                .map_err(|_| Failure::Usage(format!("--status {status} is no HTTP status")))?;
            let mut headers = http::HeaderMap::new();
            if !body.is_empty() {
                let json = serde_json::from_str::<serde_json::Value>(body).is_ok();
                let content_type = if json {
                    "application/json"
                } else {
                    "text/plain; charset=utf-8"
                };
                headers.insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static(content_type),
                );
            }
            let response = StoredResponse {
                status: code,
                headers,
                body: Bytes::from(body.to_owned()),
                trailers: None,
            };
            Ok(Outcome::new(status, response.encode()))
        }
        other => Err(Failure::Usage(format!("--encoding {other:?}: http or raw"))),
    }
}

/// What an action prints.
#[derive(Serialize)]
struct Done<'a> {
    action: &'static str,
    applied: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    refusal: Option<&'static str>,
    key_hash: String,
    was: &'a RecordView,
}

/// Runs `step` on the record `found`, fenced to `fence` (or the record as found).
pub(crate) async fn act(
    admin: &Admin,
    found: &Found,
    fence: &FenceArgs,
    action: &ActionArgs,
    step: Step,
    out: &mut Output,
) -> Result<(), Failure> {
    let Found { key, record, .. } = found;
    let fence = Fence {
        token: fence.token.map_or(record.token, FencingToken::new),
        updated_at: fence.updated_at_ms.map_or(record.updated_at, |at| {
            SystemTime::UNIX_EPOCH + Duration::from_millis(at)
        }),
    };
    let was = RecordView::of(record, SystemTime::now());
    confirm(
        &format!(
            "{} the {} record {} of {} (attempt {}, last written {} ago, token {})?",
            step.verb(),
            was.state,
            was.key_hash,
            was.namespace,
            was.attempts,
            age(was.age_ms),
            was.token
        ),
        action.yes,
    )?;
    let actor = action.actor();
    let applied = match &step {
        Step::Release => operations::Step::Release,
        Step::Complete { outcome, ttl } => operations::Step::Complete(outcome, *ttl),
        Step::Delete => operations::Step::Delete,
        Step::Resume => operations::Step::Resume,
    };
    let acted = admin.act(key, fence, &actor, applied).await?;
    let refusal = match &acted {
        Acted::Applied => None,
        Acted::Refused { refusal, .. } => Some(refusal.as_str()),
    };
    let done = Done {
        action: step.verb(),
        applied: acted.applied(),
        refusal,
        key_hash: key.to_hex(),
        was: &was,
    };
    if out.json() {
        out.line(&done)?;
    }
    match refusal {
        None => {
            if !out.json() {
                out.text(&format!("{}d {}", step.verb(), done.key_hash))?;
            }
            Ok(())
        }
        Some(refusal) => Err(Failure::Refused(format!(
            "{} refused ({refusal}): {}",
            step.verb(),
            match refusal {
                "absent" => "the record is gone (released, completed and expired, or deleted)",
                "moved_on" =>
                    "the record moved on since it was listed (renewed, taken over or completed)",
                _ =>
                    "the record is completed: only in-progress records are released or completed by hand",
            }
        ))),
    }
}
