//! Metric names, reported through the [`metrics`](https://docs.rs/metrics) facade.
//!
//! Install any `metrics` recorder (Prometheus, StatsD, …) to collect them; without one they cost
//! next to nothing. Every counter carries a `namespace` label.

/// Counter of claim decisions, labelled `decision` = `execute` | `takeover` | `replay` |
/// `in_flight` | `mismatch`.
pub const DECISIONS: &str = "idempotency_decisions_total";
/// Counter of new keys the memory store refused because it was full (records or bytes of
/// stored responses at their bound, with nothing expired to evict).
pub const MEMORY_STORE_FULL: &str = "idempotency_memory_store_full_total";
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
/// Counter of requests that reused a key with another fingerprint and were answered with the
/// stored response instead of a refusal (a gateway's conflicting notification), labelled
/// `namespace`; each is also logged at WARN with the record's id.
pub const CONFLICTS: &str = "idempotency_conflicts_total";

/// Gauge of records per namespace and `state` (`in_progress` | `abandoned` | `completed`), as
/// an operations count last found them (`idempotency_operations::Admin::publish_gauges`:
/// a SQL store counts through its index, Redis by a bounded scan of every record).
pub const RECORDS: &str = "idempotency_records";
/// Gauge of the age, in seconds since its last write, of a namespace's oldest abandoned record
/// (0 when there is none), as the same count found it.
pub const OLDEST_ABANDONED: &str = "idempotency_oldest_abandoned_seconds";

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
    metrics::describe_gauge!(RECORDS, "Idempotency records by namespace and state");
    metrics::describe_gauge!(
        OLDEST_ABANDONED,
        "Seconds since the oldest abandoned record of a namespace was last written"
    );
}

/// The counters of one namespace, with their label sets built once.
///
/// `metrics::counter!` builds its key (name, label vector, owned label values, hash) on every
/// call; a front end that serves one namespace builds these keys once (with its
/// [`Namespace`](crate::Namespace)) and only looks the counter up in the installed recorder per
/// event. The recorder is asked at every event, so a recorder installed later (or a thread-local
/// one) still sees every count.
#[derive(Debug)]
pub(crate) struct NamespaceCounters {
    decisions: [metrics::Key; DecisionLabel::ALL.len()],
    released: metrics::Key,
    store_errors: [metrics::Key; StoreOp::ALL.len()],
    stale_owners: [metrics::Key; StoreOp::ALL.len()],
}

/// The `decision` label of [`DECISIONS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DecisionLabel {
    Execute,
    Takeover,
    Replay,
    InFlight,
    Mismatch,
}

impl DecisionLabel {
    const ALL: [Self; 5] = [
        Self::Execute,
        Self::Takeover,
        Self::Replay,
        Self::InFlight,
        Self::Mismatch,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Execute => "execute",
            Self::Takeover => "takeover",
            Self::Replay => "replay",
            Self::InFlight => "in_flight",
            Self::Mismatch => "mismatch",
        }
    }
}

/// The `op` label of [`STORE_ERRORS`] and [`STALE_OWNERS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StoreOp {
    Claim,
    Complete,
    Release,
    Touch,
    Undo,
    /// A read of an in-flight key's record by the duplicates waiting for it.
    Get,
}

impl StoreOp {
    const ALL: [Self; 6] = [
        Self::Claim,
        Self::Complete,
        Self::Release,
        Self::Touch,
        Self::Undo,
        Self::Get,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Claim => "claim",
            Self::Complete => "complete",
            Self::Release => "release",
            Self::Touch => "touch",
            Self::Undo => "undo",
            Self::Get => "get",
        }
    }
}

/// Where the engine's counters come from (the module that used to call `counter!`).
static ENGINE_METADATA: metrics::Metadata<'static> = metrics::Metadata::new(
    "idempotency_core::engine",
    metrics::Level::INFO,
    Some("idempotency_core::engine"),
);

/// Increments the counter `key` by one in the current recorder (thread-local or global, as
/// `counter!` does), without building the key.
pub(crate) fn increment(key: &metrics::Key, metadata: &metrics::Metadata<'_>) {
    metrics::with_recorder(|recorder| recorder.register_counter(key, metadata)).increment(1);
}

fn key(
    name: &'static str,
    namespace: &str,
    label: &'static str,
    value: &'static str,
) -> metrics::Key {
    metrics::Key::from_parts(
        name,
        vec![
            metrics::Label::new("namespace", namespace.to_owned()),
            metrics::Label::new(label, value),
        ],
    )
}

impl NamespaceCounters {
    pub(crate) fn new(namespace: &str) -> Self {
        Self {
            decisions: DecisionLabel::ALL
                .map(|decision| key(DECISIONS, namespace, "decision", decision.as_str())),
            released: metrics::Key::from_parts(
                RELEASED,
                vec![metrics::Label::new("namespace", namespace.to_owned())],
            ),
            store_errors: StoreOp::ALL.map(|op| key(STORE_ERRORS, namespace, "op", op.as_str())),
            stale_owners: StoreOp::ALL.map(|op| key(STALE_OWNERS, namespace, "op", op.as_str())),
        }
    }

    pub(crate) fn decision(&self, decision: DecisionLabel) {
        increment(&self.decisions[decision as usize], &ENGINE_METADATA);
    }

    pub(crate) fn released(&self) {
        increment(&self.released, &ENGINE_METADATA);
    }

    pub(crate) fn store_error(&self, op: StoreOp) {
        increment(&self.store_errors[op as usize], &ENGINE_METADATA);
    }

    pub(crate) fn stale_owner(&self, op: StoreOp) {
        increment(&self.stale_owners[op as usize], &ENGINE_METADATA);
    }
}

/// The same counts for a namespace without prebuilt keys (built per event, as `counter!` does).
pub(crate) mod adhoc {
    use super::*;

    pub(crate) fn decision(namespace: &str, decision: DecisionLabel) {
        increment(
            &key(DECISIONS, namespace, "decision", decision.as_str()),
            &ENGINE_METADATA,
        );
    }

    pub(crate) fn released(namespace: &str) {
        increment(
            &metrics::Key::from_parts(
                RELEASED,
                vec![metrics::Label::new("namespace", namespace.to_owned())],
            ),
            &ENGINE_METADATA,
        );
    }

    pub(crate) fn store_error(namespace: &str, op: StoreOp) {
        increment(
            &key(STORE_ERRORS, namespace, "op", op.as_str()),
            &ENGINE_METADATA,
        );
    }

    pub(crate) fn stale_owner(namespace: &str, op: StoreOp) {
        increment(
            &key(STALE_OWNERS, namespace, "op", op.as_str()),
            &ENGINE_METADATA,
        );
    }
}
