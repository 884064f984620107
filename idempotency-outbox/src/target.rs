//! Where a relay delivers: the target trait and how a delivery fails.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use crate::table::Claimed;

/// How one delivery failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeliveryError {
    /// The target could not be reached (connection refused or lost, no answer in time): the
    /// message is given back without counting a failure, and the relay backs off.
    Unreachable(String),
    /// The target answered and did not take the message (nacked, an HTTP error status):
    /// counted, retried with backoff, dead after `max_attempts`.
    Refused(String),
    /// The message's destination does not exist (yet): RabbitMQ returned it unroutable (no queue
    /// bound for its topic), JetStream has no stream for its subject ("no responders"), the
    /// HTTP endpoint answered 404. Usually the receiver has not started yet: while the message
    /// is younger than the relay's
    /// [`with_destination_grace`](crate::Relay::with_destination_grace) (1 h by default) it is
    /// given back uncounted and tried again later; older, it counts as [`Refused`](Self::Refused).
    NoDestination(String),
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
            Self::NoDestination(reason) => write!(f, "no destination for the message: {reason}"),
            Self::Deferred { reason, .. } => write!(f, "target asked to try later: {reason}"),
        }
    }
}

impl std::error::Error for DeliveryError {}

/// Why a target cannot start: a destination it was told to require is missing, or preparing
/// one failed (the broker refused a declaration, or could not be reached).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DestinationError(pub String);

impl fmt::Display for DestinationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "outbox target not ready: {}", self.0)
    }
}

impl std::error::Error for DestinationError {}

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

    /// Makes sure the destinations the target was configured with exist, before the relay
    /// delivers anything ([`Relay::try_run`](crate::Relay::try_run)): declares them, or checks
    /// them and fails with what is missing. By default there is nothing to prepare.
    fn prepare(&self) -> impl Future<Output = Result<(), DestinationError>> + Send {
        std::future::ready(Ok(()))
    }
}
