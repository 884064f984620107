//! What identifies a gateway's notification (the callback preset), and what a conflicting one
//! gets.

use std::borrow::Cow;
use std::sync::Arc;

use idempotency_core::KeyError;
use serde_json::Value;

use crate::json::LazyJson;

/// The top-level body fields a gateway changes on each retry of one notification (its
/// signature, its send time, its nonce): the callback preset's default fingerprint leaves them
/// out, so a re-signed, re-timed retry is the same notification.
pub const PER_ATTEMPT_FIELDS: &[&str] = &[
    "sign",
    "sign_type",
    "signature",
    "notify_time",
    "notify_id",
    "timestamp",
    "nonce",
];

/// The identity of a payment gateway's notification, for
/// [`callback`](crate::IdempotencyLayerBuilder::callback): which body fields make the key, and
/// which make the fingerprint.
///
/// - **key**: the trade (`/out_trade_no`), plus its **status** (`/trade_status`,
///   `/event_type`) when one trade gets several notifications: a refund or `TRADE_FINISHED`
///   notice for a trade is then a notification of its own, not a duplicate of the payment
///   notice.
/// - **fingerprint**: the named business **fields** (`/total_amount`), canonical JSON, so field
///   order, spacing, a new `notify_time` or `sign` do not matter. Without named fields, the
///   whole body less its [`PER_ATTEMPT_FIELDS`].
///
/// A retry with the same key and fingerprint is a duplicate and gets the stored success. One
/// with the same key and another fingerprint is a conflict: see [`ConflictAnswer`].
///
/// ```
/// use idempotency_core::MemoryStore;
/// use idempotency_tower::{Callback, IdempotencyLayer};
///
/// let layer = IdempotencyLayer::builder(MemoryStore::new())
///     .namespace("payments.callback")
///     .callback(
///         Callback::key("/out_trade_no")
///             .status("/trade_status")
///             .fields(["/total_amount"]),
///     )
///     .shared_scope()
///     .build();
/// # let _ = layer;
/// ```
#[derive(Clone, Debug)]
pub struct Callback {
    pub(crate) key: String,
    pub(crate) status: Option<String>,
    pub(crate) fields: Option<Arc<[String]>>,
}

impl Callback {
    /// A notification keyed by this body field (a JSON Pointer, e.g. `/trade_no`).
    pub fn key(pointer: impl Into<String>) -> Self {
        Self {
            key: pointer.into(),
            status: None,
            fields: None,
        }
    }

    /// Adds the notification's status field (a JSON Pointer, e.g. `/trade_status`) to its key:
    /// notices of one trade with different statuses are different notifications. A string or
    /// a number; an absent or `null` status adds nothing, any other type is refused (400).
    pub fn status(mut self, pointer: impl Into<String>) -> Self {
        self.status = Some(pointer.into());
        self
    }

    /// Fingerprints these business fields (JSON Pointers, e.g. `/total_amount`), canonical and
    /// field-order independent, with method and path.
    pub fn fields<P: Into<String>>(mut self, pointers: impl IntoIterator<Item = P>) -> Self {
        let fields: Vec<String> = pointers.into_iter().map(Into::into).collect();
        self.fields = Some(fields.into());
        self
    }
}

impl From<&str> for Callback {
    fn from(pointer: &str) -> Self {
        Self::key(pointer)
    }
}

impl From<String> for Callback {
    fn from(pointer: String) -> Self {
        Self::key(pointer)
    }
}

/// What a request gets whose key was already used with another fingerprint (a *conflict*).
///
/// Either way the record it met is marked ([`Store::mark_conflict`]: a count of conflicts and
/// the last one's time; a failure to mark is logged and changes no answer), so that
/// reconciliation lists it: `idempotency conflicts`, the admin router's
/// `GET /records?min_conflicts=1`, `idempotency inspect` and the JSON views print the count and
/// the time. A conflict refused is marked too: it is the same doubt about the record (a
/// gateway answered 422 sends it again for a day).
///
/// [`Store::mark_conflict`]: idempotency_core::Store::mark_conflict
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConflictAnswer {
    /// 422 (gRPC `FAILED_PRECONDITION`), the handler not run, the record's outcome untouched
    /// (only marked). The default of the API and gRPC presets (the IETF draft's answer).
    #[default]
    Reject,
    /// The stored response, replayed as for a duplicate, and never silently: a WARN log (target
    /// `idempotency`, with the record's id) and [`idempotency_core::metrics::CONFLICTS`]. The
    /// default of the callback preset: a gateway answered 422 retries the notification for a
    /// day. While the first request still runs, the conflict is answered as a duplicate in
    /// flight (409 + `Retry-After`); a retry then gets the stored response.
    ReplayStored,
}

/// The key text of a notification: its key, then a space and its status if it has one. A key
/// never holds a space (visible ASCII only), so the two parts cannot be confused; this is
/// the raw key operators look a record up by (`T1 TRADE_SUCCESS`).
pub(crate) fn key_with_status<'k>(
    key: &'k str,
    status_pointer: &str,
    json: &mut LazyJson<'_>,
) -> Result<Cow<'k, str>, KeyError> {
    let status = match json.field(status_pointer).map_err(KeyError::Body)? {
        None | Some(Value::Null) => return Ok(Cow::Borrowed(key)),
        Some(Value::String(text)) => Cow::Borrowed(text.as_str()),
        Some(Value::Number(number)) => Cow::Owned(number.to_string()),
        Some(_) => {
            return Err(KeyError::Body(format!(
                "the status field {status_pointer} must be a string or a number"
            )));
        }
    };
    Ok(Cow::Owned(format!("{key} {status}")))
}
