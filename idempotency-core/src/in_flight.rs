//! What a duplicate gets while the first call with its key is still running: one vocabulary for
//! every front end.

use std::time::{Duration, Instant};

/// How long a duplicate waits, by default, for the first call with its key where a front end
/// waits ([`InFlightPolicy::wait`]): the callback and gRPC presets, transactional claims.
pub const DEFAULT_IN_FLIGHT_WAIT: Duration = Duration::from_secs(5);

/// What a duplicate gets while the first call with its key is still running ("in flight").
///
/// Every front end takes this one policy:
///
/// | front end | default | in flight after the wait |
/// |---|---|---|
/// | HTTP layer, API preset (IETF, Stripe) | [`Reject`](Self::Reject) | 409 + `Retry-After` |
/// | HTTP layer, callback preset | wait 5 s | 409 + `Retry-After` |
/// | gRPC preset | wait 5 s, bounded by `grpc-timeout` | `ABORTED` |
/// | transactional HTTP / gRPC | the layer's preset | as the layer |
/// | `#[idempotent]`, `idempotency_function::Call` | [`Reject`](Self::Reject) | [`Error::InFlight`](crate::Error::InFlight) |
/// | `idempotency_sql::TxStore` claims | wait 5 s on the first one's uncommitted record | `TxClaim::InFlight` |
/// | queue consumers (`IdempotentConsumer`) | wait 5 s; two tiers: the SQL record's wait on the first one's transaction | requeue after a delay |
///
/// Waiting never outlives the caller: front ends bound it by the caller's deadline as well
/// ([`InFlightPolicy::until`]).
///
/// ```
/// use idempotency_core::InFlightPolicy;
/// use std::time::Duration;
///
/// let policy = InFlightPolicy::wait(Duration::from_secs(5));
/// assert_eq!(policy.max_wait(), Duration::from_secs(5));
/// assert_eq!(InFlightPolicy::Reject.max_wait(), Duration::ZERO);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InFlightPolicy {
    /// Answer at once that the first call is still running (HTTP 409 + `Retry-After`, gRPC
    /// `ABORTED`, [`Error::InFlight`](crate::Error::InFlight)).
    #[default]
    Reject,
    /// Wait up to `max` for the first call to finish, then replay its outcome (or run, if it
    /// was released or rolled back); still running after `max` → as [`Reject`](Self::Reject).
    Wait {
        /// The longest a duplicate waits.
        max: Duration,
    },
}

impl InFlightPolicy {
    /// Wait up to `max`, then reject.
    pub fn wait(max: Duration) -> Self {
        Self::Wait { max }
    }

    /// The longest a duplicate waits: zero for [`Reject`](Self::Reject).
    pub fn max_wait(self) -> Duration {
        match self {
            Self::Reject => Duration::ZERO,
            Self::Wait { max } => max,
        }
    }

    /// This policy, waiting no later than `deadline` (the caller's): a wait that would outlive
    /// it is shortened, and one with no time left becomes [`Reject`](Self::Reject).
    ///
    /// ```
    /// use idempotency_core::InFlightPolicy;
    /// use std::time::{Duration, Instant};
    ///
    /// let soon = Instant::now() + Duration::from_millis(300);
    /// let bounded = InFlightPolicy::wait(Duration::from_secs(5)).until(Some(soon));
    /// assert!(bounded.max_wait() <= Duration::from_millis(300));
    /// assert_eq!(InFlightPolicy::wait(Duration::from_secs(5)).until(Some(Instant::now())), InFlightPolicy::Reject);
    /// ```
    pub fn until(self, deadline: Option<Instant>) -> Self {
        match (self, deadline) {
            (Self::Wait { max }, Some(deadline)) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    Self::Reject
                } else {
                    Self::Wait { max: max.min(left) }
                }
            }
            (policy, _) => policy,
        }
    }
}
