//! Metric names, reported through the [`metrics`](https://docs.rs/metrics) facade.
//!
//! Install any `metrics` recorder (Prometheus, StatsD, …) to collect them; without one they cost
//! next to nothing. Every counter carries a `namespace` label.

/// Counter of claim decisions, labelled `decision` = `execute` | `takeover` | `replay` |
/// `in_flight` | `mismatch`.
pub const DECISIONS: &str = "idempotency_decisions_total";
/// Counter of store calls that failed (unavailable, timed out, …), labelled `op`.
pub const STORE_ERRORS: &str = "idempotency_store_errors_total";
/// Counter of stale owners refused by fencing (complete/release/touch after a takeover).
pub const STALE_OWNERS: &str = "idempotency_stale_owner_total";
/// Counter of requests let through without idempotency because the store failed and the front
/// end is configured fail-open.
pub const FAIL_OPEN: &str = "idempotency_fail_open_total";
/// Counter of executions whose outcome was released instead of stored (errors, 5xx).
pub const RELEASED: &str = "idempotency_released_total";
/// Counter of requests a front end refused itself (missing or invalid key, body too large, in
/// flight, key reused, store unavailable), labelled `reason`.
pub const REFUSALS: &str = "idempotency_refusals_total";

/// Registers descriptions of the metrics above with the installed recorder.
pub fn describe() {
    metrics::describe_counter!(DECISIONS, "Idempotency claim decisions by kind");
    metrics::describe_counter!(STORE_ERRORS, "Idempotency store calls that failed");
    metrics::describe_counter!(STALE_OWNERS, "Stale owners refused by fencing tokens");
    metrics::describe_counter!(
        FAIL_OPEN,
        "Requests passed through because the store failed (fail-open)"
    );
    metrics::describe_counter!(RELEASED, "Executions released for retry instead of stored");
    metrics::describe_counter!(REFUSALS, "Requests refused by a front end, by reason");
}
