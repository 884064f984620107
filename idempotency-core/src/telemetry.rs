//! The `tracing` spans of the toolkit: their names and attribute names, in one place.
//!
//! Every guarded operation runs in one span named [`GUARD_SPAN`] (`idempotency.guard`),
//! whatever its front end: an HTTP or gRPC request behind the tower layer, an `#[idempotent]`
//! function (or an `idempotency_function::run`), a queue delivery. It covers the
//! claim, the work, and the complete or release. Every operator action (release, complete,
//! delete, purge) runs in one span named [`ADMIN_SPAN`] (`idempotency.admin`). Both have the
//! target [`TARGET`] (`idempotency`). The guard span is at level DEBUG, as `tower-http`'s request
//! spans are: a service logging at INFO pays nothing for it (a `fmt` subscriber formats every
//! attribute of an enabled span, which would add 70 % to the layer's own instructions per
//! request), and `RUST_LOG=info,idempotency=debug` (or an OpenTelemetry layer's filter) selects
//! it. Operator actions are rare and at INFO. With no subscriber, or a filter that leaves them
//! out, they are never built.
//!
//! | attribute | when | value |
//! |---|---|---|
//! | [`NAMESPACE`] `idempotency.namespace` | always | the namespace |
//! | [`KEY_HASH`] `idempotency.key_hash` | once the key is known | the storage key in hex (a digest of namespace, principal and key): **never the raw key** |
//! | [`DECISION`] `idempotency.decision` | after the claim | `execute`, `takeover`, `replay`, `in_flight`, `mismatch` (the `decision` label of [`metrics::DECISIONS`](crate::metrics::DECISIONS)) |
//! | [`ATTEMPT`] `idempotency.attempt` | when it executes | 1 for the first owner, `n + 1` for a takeover |
//! | [`FENCING_TOKEN`] `idempotency.fencing_token` | when it executes, and on an operator's fenced action | the owner's fencing token |
//! | [`FINISH`] `idempotency.finish` | when the work ended | `completed` (outcome stored) or `released` (a retry runs again) |
//! | [`ERROR_TYPE`] `error.type` (OpenTelemetry) | when it failed | [`error_type`]: `store_unavailable`, `store_timeout`, `lease_lost`, …; `handler_error`, `handler_panic` for a consumer's handler |
//! | [`HTTP_METHOD`] `http.request.method` (OpenTelemetry) | HTTP and gRPC | the request method |
//! | [`URL_PATH`] `url.path` (OpenTelemetry) | HTTP and gRPC | the request path (for gRPC, `/package.Service/Method`) |
//! | [`MESSAGE_ID`] `messaging.message.id` (OpenTelemetry) | queue consumers | the broker's message id, **left out when it is the key** (a consumer keyed by message id) |
//! | [`DESTINATION`] `messaging.destination.name` (OpenTelemetry) | queue consumers | the subject or routing key |
//! | [`ADMIN_ACTION`] `idempotency.admin.action` | operator actions | `release`, `complete`, `delete`, `purge` |
//! | [`ADMIN_RESULT`] `idempotency.admin.result` | operator actions | `applied`, or why it was refused (`absent`, `moved_on`, …) |
//!
//! ```
//! use idempotency_core::telemetry;
//!
//! // What an OpenTelemetry pipeline or a log query filters on.
//! assert_eq!(telemetry::GUARD_SPAN, "idempotency.guard");
//! assert_eq!(telemetry::KEY_HASH, "idempotency.key_hash");
//! assert_eq!(telemetry::ERROR_TYPE, "error.type");
//! ```

use tracing::Span;
use tracing::field::{Empty, Value};

use crate::{Error, Lease, StorageKey};

/// The target of every span here: `RUST_LOG=idempotency=debug` selects them.
pub const TARGET: &str = "idempotency";
/// The span of one guarded operation: claim, work, complete or release.
pub const GUARD_SPAN: &str = "idempotency.guard";
/// The span of one operator action (release, complete, delete, purge).
pub const ADMIN_SPAN: &str = "idempotency.admin";

/// The namespace.
pub const NAMESPACE: &str = "idempotency.namespace";
/// The storage key in hex: a digest, never the raw key.
pub const KEY_HASH: &str = "idempotency.key_hash";
/// The claim's decision.
pub const DECISION: &str = "idempotency.decision";
/// The attempt number of the owner.
pub const ATTEMPT: &str = "idempotency.attempt";
/// The fencing token of the owner (or of the record an operator acts on).
pub const FENCING_TOKEN: &str = "idempotency.fencing_token";
/// How the work ended: `completed` or `released`.
pub const FINISH: &str = "idempotency.finish";
/// The class of error the operation ended with (OpenTelemetry `error.type`).
pub const ERROR_TYPE: &str = "error.type";
/// The HTTP request method (OpenTelemetry `http.request.method`).
pub const HTTP_METHOD: &str = "http.request.method";
/// The request path (OpenTelemetry `url.path`).
pub const URL_PATH: &str = "url.path";
/// The broker's message id (OpenTelemetry `messaging.message.id`).
pub const MESSAGE_ID: &str = "messaging.message.id";
/// The subject or routing key (OpenTelemetry `messaging.destination.name`).
pub const DESTINATION: &str = "messaging.destination.name";
/// The operator action.
pub const ADMIN_ACTION: &str = "idempotency.admin.action";
/// What an operator action did: `applied`, or why it was refused.
pub const ADMIN_RESULT: &str = "idempotency.admin.result";

/// A [`GUARD_SPAN`] with the namespace, the front end's own attributes, and those the engine
/// records as the operation goes (key hash, decision, attempt, token, finish, error type).
macro_rules! guard_span {
    ($namespace:expr $(, { $name:expr } = $value:expr)*) => {
        tracing::debug_span!(
            target: TARGET,
            GUARD_SPAN,
            { NAMESPACE } = $namespace,
            $({ $name } = $value,)*
            { KEY_HASH } = Empty,
            { DECISION } = Empty,
            { ATTEMPT } = Empty,
            { FENCING_TOKEN } = Empty,
            { FINISH } = Empty,
            { ERROR_TYPE } = Empty,
        )
    };
}

/// The [`GUARD_SPAN`] of an HTTP or gRPC request (the tower layer's); disabled (and not built)
/// unless a subscriber wants it.
pub fn http_span(namespace: &str, method: &str, path: &str) -> Span {
    guard_span!(namespace, { HTTP_METHOD } = method, { URL_PATH } = path)
}

/// The [`GUARD_SPAN`] of an idempotent function call (`#[idempotent]`,
/// `idempotency_function::run`).
pub fn function_span(namespace: &str) -> Span {
    guard_span!(namespace)
}

/// The [`GUARD_SPAN`] of a queue delivery; its message id is recorded once the key is known
/// ([`record_message_id`]).
pub fn message_span(namespace: &str, destination: &str) -> Span {
    guard_span!(
        namespace,
        { DESTINATION } = destination,
        { MESSAGE_ID } = Empty
    )
}

/// Records a delivery's message id on the current span as [`MESSAGE_ID`], unless it is the
/// raw key (a consumer keyed by message id): the raw key never appears.
pub fn record_message_id(message_id: &str, raw_key: &str) {
    if message_id != raw_key {
        record_current(MESSAGE_ID, message_id);
    }
}

/// The [`ADMIN_SPAN`] of an operator action on one record (`key` `None`: a purge).
pub fn admin_span(action: &str, namespace: Option<&str>, key: Option<&StorageKey>) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        ADMIN_SPAN,
        { ADMIN_ACTION } = action,
        { NAMESPACE } = Empty,
        { KEY_HASH } = Empty,
        { FENCING_TOKEN } = Empty,
        { ADMIN_RESULT } = Empty,
        { ERROR_TYPE } = Empty,
    );
    if !span.is_disabled() {
        if let Some(namespace) = namespace {
            span.record(NAMESPACE, namespace);
        }
        if let Some(key) = key {
            span.record(KEY_HASH, tracing::field::display(key));
        }
    }
    span
}

/// The value of [`ERROR_TYPE`] for a store or engine error: low-cardinality, stable.
pub fn error_type(error: &Error) -> &'static str {
    match error {
        Error::InFlight { .. } => "in_flight",
        Error::Mismatch => "mismatch",
        Error::Key(_) => "invalid_key",
        Error::IllegalTransition { .. } => "illegal_transition",
        Error::NotFound => "not_found",
        Error::Unavailable(_) => "store_unavailable",
        Error::Timeout(_) => "store_timeout",
        Error::LeaseLost => "lease_lost",
        Error::CapacityExceeded(_) => "store_full",
        Error::Codec(_) => "codec",
        Error::Config(_) => "config",
        Error::Backend(_) => "store_backend",
    }
}

/// Whether a subscriber may want the spans here: one load of the global level filter, so
/// that with no subscriber nothing else runs.
#[inline]
fn may_record() -> bool {
    tracing::level_enabled!(tracing::Level::DEBUG)
}

/// Records `name = value` on the current span, if a subscriber may want it (fields the span
/// does not have are ignored).
#[inline]
pub fn record_current(name: &str, value: &str) {
    if may_record() {
        Span::current().record(name, value);
    }
}

/// Records an error on the current span as [`ERROR_TYPE`].
#[inline]
pub fn record_error(error: &Error) {
    record_current(ERROR_TYPE, error_type(error));
}

/// Records the storage key on the current span as [`KEY_HASH`].
#[inline]
pub fn record_key(key: &StorageKey) {
    if may_record() {
        Span::current().record(KEY_HASH, tracing::field::display(key));
    }
}

/// Records a claim's decision and the key (and, when it executes, the owner's attempt and
/// token) on the current span, in one call (a subscriber formats each call once).
#[inline]
pub fn record_decision(decision: &str, key: &StorageKey, lease: Option<&Lease>) {
    if may_record() {
        record_decision_on(&Span::current(), decision, key, lease);
    }
}

fn record_decision_on(span: &Span, decision: &str, key: &StorageKey, lease: Option<&Lease>) {
    let Some(fields) = span.metadata().map(|metadata| metadata.fields()) else {
        return;
    };
    let (Some(decision_field), Some(key_field)) = (fields.field(DECISION), fields.field(KEY_HASH))
    else {
        return;
    };
    let key = tracing::field::display(key);
    match (lease, fields.field(ATTEMPT), fields.field(FENCING_TOKEN)) {
        (Some(lease), Some(attempt), Some(token)) => {
            let token_value = lease.token.get();
            span.record_all(&fields.value_set(&[
                (&key_field, Some(&key as &dyn Value)),
                (&decision_field, Some(&decision as &dyn Value)),
                (&attempt, Some(&lease.attempt as &dyn Value)),
                (&token, Some(&token_value as &dyn Value)),
            ]));
        }
        _ => {
            span.record_all(&fields.value_set(&[
                (&key_field, Some(&key as &dyn Value)),
                (&decision_field, Some(&decision as &dyn Value)),
            ]));
        }
    }
}
