//! Where a relay delivers: the target trait and how a delivery fails.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use idempotency_core::sql::outbox::Claimed;

/// How one delivery failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeliveryError {
    /// The target could not be reached (connection refused or lost, no answer in time): the
    /// message is given back without counting a failure, and the relay backs off.
    Unreachable(String),
    /// The target answered and did not take the message (nacked, unroutable, no stream for the
    /// subject, an HTTP error status): counted, retried with backoff, dead after
    /// `max_attempts`.
    Refused(String),
    /// The target answered "not now" (HTTP 409 from a receiver whose idempotency layer is still
    /// running the same key, 429, 503): the message is given back without counting a failure,
    /// due again after `retry_after` (the receiver's `Retry-After`) or else the relay's first
    /// backoff step; the relay goes on with other messages.
    Deferred {
        /// What the target said.
        reason: String,
        /// When the target asked to be tried again, if it said.
        retry_after: Option<Duration>,
    },
}

impl fmt::Display for DeliveryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unreachable(reason) => write!(f, "target unreachable: {reason}"),
            Self::Refused(reason) => write!(f, "target refused the message: {reason}"),
            Self::Deferred { reason, .. } => write!(f, "target asked to try later: {reason}"),
        }
    }
}

impl std::error::Error for DeliveryError {}

/// A destination for outbox messages: a broker or an HTTP endpoint.
///
/// `deliver` answers once the target has taken every message it could (a publisher confirm, a
/// stream's ack, a 2xx), one result per message, in order. Every delivery carries the message's
/// id as its idempotency key, so the receiver can drop the copies at-least-once delivery makes.
pub trait Target: Send + Sync + 'static {
    /// Delivers `batch`; `result[i]` is the fate of `batch[i]`.
    fn deliver(
        &self,
        batch: &[Claimed],
    ) -> impl Future<Output = Vec<Result<(), DeliveryError>>> + Send;
}
