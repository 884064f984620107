//! What became of a delivery, and what the broker is told.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use idempotency_core::KeyError;

/// What the broker is told about a delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Acknowledge: the message is done with (processed now, or a duplicate).
    Ack,
    /// Negative-acknowledge and redeliver, no sooner than `delay`.
    Requeue {
        /// How long to wait before the message comes back.
        delay: Duration,
    },
    /// Refuse without redelivery (dead-letter where the broker is configured for it).
    Reject,
}

/// Why a delivery is refused for good.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RejectReason {
    /// The message carries no usable business key, so it cannot be guarded.
    Key(KeyError),
    /// The business key was already used with another payload.
    Mismatch,
    /// The payload is not what the handler reads (malformed JSON, a missing field).
    Payload(String),
    /// The handler failed on the last delivery allowed
    /// ([`IdempotentConsumer::with_max_deliveries`](crate::IdempotentConsumer::with_max_deliveries)).
    Exhausted {
        /// How many times the broker delivered it.
        deliveries: u64,
        /// The handler's last error.
        error: String,
    },
}

impl RejectReason {
    /// A short label (`no_key`, `mismatch`, `payload`, `exhausted`) for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Key(_) => "no_key",
            Self::Mismatch => "mismatch",
            Self::Payload(_) => "payload",
            Self::Exhausted { .. } => "exhausted",
        }
    }
}

/// The reason as dead-letter headers carry it: `no business key: …`, `payload mismatch` or
/// `unreadable payload: …`.
impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Key(error) => write!(f, "no business key: {error}"),
            Self::Mismatch => f.write_str("payload mismatch"),
            Self::Payload(reason) => write!(f, "unreadable payload: {reason}"),
            Self::Exhausted { deliveries, error } => {
                write!(
                    f,
                    "handler failed on delivery {deliveries}, the last allowed: {error}"
                )
            }
        }
    }
}

/// What the consumer decided for one delivery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The handler ran for the first time and succeeded. `recorded` is false if the outcome
    /// was not stored when the message was settled (logged and counted; the engine retries a
    /// transient failure in the background; the message is acked anyway, since redelivering it
    /// would run the work again).
    Processed {
        /// Whether the outcome was stored.
        recorded: bool,
        /// What the work produced ([`Handled::Output`](crate::Handled::Output); empty for
        /// [`Handled::Done`](crate::Handled::Done)).
        output: Bytes,
    },
    /// The store already held a completed outcome for the key: replayed, acked, the handler
    /// not run.
    Replayed {
        /// What the first run produced, as the store kept it: the same answer again.
        output: Bytes,
    },
    /// The handler's own record of truth (for example a SQL dedup row) said the work was done
    /// already: acked, business work not run again.
    AlreadyDone {
        /// What the first run produced, as that record keeps it.
        output: Bytes,
    },
    /// The key was first used with other fingerprinted content (a conflicting copy of the
    /// event): acked, not run, logged at WARN and counted
    /// ([`CONFLICTS`](crate::CONFLICTS); [`OnConflict::Ack`](crate::OnConflict::Ack)).
    Conflict,
    /// Another consumer is processing the same key, still after the in-flight wait: requeued
    /// with a delay.
    InFlight {
        /// The delay before redelivery.
        retry_after: Duration,
    },
    /// The handler failed or panicked: the key was released and the message requeued.
    Failed {
        /// The delay before redelivery.
        retry_after: Duration,
        /// The handler's error.
        error: String,
    },
    /// The store could not be reached: requeued, the handler was not run.
    StoreUnavailable {
        /// The delay before redelivery.
        retry_after: Duration,
        /// The store's error.
        error: String,
    },
    /// Refused for good (no key, an unreadable payload, the key reused with another payload
    /// under [`OnConflict::DeadLetter`](crate::OnConflict::DeadLetter), or a handler failing on
    /// the last delivery allowed).
    Rejected(RejectReason),
}

impl Verdict {
    /// What the work produced for the key, now or the first time (the coupon id of a
    /// coupon grant): the same bytes for every delivery of it that is acked, `None` for the
    /// others.
    pub fn output(&self) -> Option<&Bytes> {
        match self {
            Self::Processed { output, .. }
            | Self::Replayed { output }
            | Self::AlreadyDone { output } => Some(output),
            _ => None,
        }
    }

    /// What the broker is told.
    pub fn action(&self) -> Action {
        match self {
            Self::Processed { .. }
            | Self::Replayed { .. }
            | Self::AlreadyDone { .. }
            | Self::Conflict => Action::Ack,
            Self::InFlight { retry_after }
            | Self::Failed { retry_after, .. }
            | Self::StoreUnavailable { retry_after, .. } => Action::Requeue {
                delay: *retry_after,
            },
            Self::Rejected(_) => Action::Reject,
        }
    }

    /// A short label (`processed`, `replayed`, `already_done`, `conflict`, `in_flight`, `failed`,
    /// `store_unavailable`, `rejected`) for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Processed { .. } => "processed",
            Self::Replayed { .. } => "replayed",
            Self::AlreadyDone { .. } => "already_done",
            Self::Conflict => "conflict",
            Self::InFlight { .. } => "in_flight",
            Self::Failed { .. } => "failed",
            Self::StoreUnavailable { .. } => "store_unavailable",
            Self::Rejected(_) => "rejected",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Processed { recorded: true, .. } => f.write_str("processed"),
            Self::Processed {
                recorded: false, ..
            } => f.write_str("processed, outcome not recorded"),
            Self::Replayed { .. } => f.write_str("replayed the stored outcome, acked"),
            Self::AlreadyDone { .. } => f.write_str("already done per the record of truth, acked"),
            Self::Conflict => f.write_str("key used before with other content, acked"),
            Self::InFlight { retry_after } => {
                write!(f, "in flight elsewhere, requeued in {retry_after:?}")
            }
            Self::Failed { retry_after, error } => {
                write!(f, "handler failed ({error}), requeued in {retry_after:?}")
            }
            Self::StoreUnavailable { retry_after, error } => {
                write!(
                    f,
                    "store unavailable ({error}), requeued in {retry_after:?}"
                )
            }
            Self::Rejected(reason) => write!(f, "rejected: {reason}"),
        }
    }
}
