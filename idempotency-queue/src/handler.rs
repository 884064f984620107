//! The business work a consumer guards.

use std::fmt;
use std::future::Future;

use crate::Job;

/// What a handler reports when it succeeds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Handled {
    /// The work ran and its effects are committed.
    #[default]
    Done,
    /// The work ran, its effects are committed, and it produced this: stored as the key's
    /// outcome (in the consumer's store too), what a later look at the key finds.
    Output(bytes::Bytes),
    /// The work had already been done (the handler's own record of truth, such as a SQL dedup
    /// row, said so); nothing ran again. It holds what that record keeps of the first run (empty
    /// if nothing), which becomes the key's outcome in the consumer's store too.
    AlreadyDone(bytes::Bytes),
    /// The handler's own record of truth holds the business key with another payload
    /// ([`Job::fingerprint`] differs); nothing ran. The consumer rejects the message, as it does
    /// when its own store reports the mismatch.
    Mismatch,
    /// The handler's own record of truth holds the business key for another owner still
    /// running (past the record's in-flight wait); nothing ran. The consumer requeues the
    /// message after `retry_after`, as when its own store reports the key in flight.
    InFlight {
        /// When to deliver again.
        retry_after: std::time::Duration,
    },
    /// The message can never be handled as it is (its payload is not what the handler reads:
    /// `two_tier::FromJob`, feature `sql`); nothing ran. The consumer rejects it
    /// ([`RejectReason::Payload`](crate::RejectReason::Payload)).
    Invalid(String),
}

impl From<()> for Handled {
    fn from((): ()) -> Self {
        Self::Done
    }
}

/// The work run once per business key.
///
/// An `Err` (or a panic) releases the key and requeues the message, so a later delivery runs it
/// again. Any `Fn(Job) -> impl Future<Output = Result<T, E>>` closure is a handler, where `T` is
/// `()` or [`Handled`] and `E` displays.
pub trait Handler: Send + Sync + 'static {
    /// Why the work failed.
    type Error: fmt::Display + Send + 'static;

    /// Runs the work for `job`.
    fn handle(&self, job: Job) -> impl Future<Output = Result<Handled, Self::Error>> + Send;

    /// Whether the handler guards itself with its own record of truth (a SQL dedup record in
    /// the business transaction, as `two_tier::SqlTruth` (feature `sql`) does), so that the
    /// consumer lets it decide whenever its own store cannot: a key in flight (perhaps a dead
    /// consumer's claim, left until its lease ends) or a store outage. The handler then runs
    /// without a fast-tier claim ([`Job::lease`] `None`) and its record decides, instead of the
    /// message being requeued. Default `false`: never run unguarded.
    ///
    /// The consumer reads it when it is built, and nothing else makes it defer: a handler of
    /// your own that wraps a guarding one passes it on (and [`record_ttl`](Self::record_ttl)),
    /// and one that keeps no record of its own must not claim it, or a fast-tier outage runs
    /// the work a second time. For `two_tier::SqlTruth`, build the consumer with
    /// `two_tier::TwoTier`: no wrapper stands between the consumer and the truth, and code of
    /// your own after the commit goes to `two_tier::Tx::after_commit`.
    fn guards_itself(&self) -> bool {
        false
    }

    /// How long the handler's own record of truth keeps a completed key, if it keeps one
    /// (`two_tier::SqlTruth`: its TTL). The consumer's store must not keep its records longer:
    /// it would vouch for keys the truth forgot. Default `None`.
    fn record_ttl(&self) -> Option<std::time::Duration> {
        None
    }

    /// Marks the handler's own record of `key` as having met a conflicting copy (the key again
    /// with other fingerprinted fields), when the consumer's store found the conflict and the
    /// handler did not run: `two_tier::SqlTruth` marks its record of truth, which
    /// reconciliation lists. A failure is the handler's to log; it changes no verdict.
    /// Default: nothing to mark.
    fn mark_conflict(
        &self,
        key: &idempotency_core::IdempotencyKey,
    ) -> impl Future<Output = ()> + Send {
        let _ = key;
        std::future::ready(())
    }
}

impl<F, Fut, T, E> Handler for F
where
    F: Fn(Job) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, E>> + Send,
    T: Into<Handled>,
    E: fmt::Display + Send + 'static,
{
    type Error = E;

    async fn handle(&self, job: Job) -> Result<Handled, E> {
        self(job).await.map(Into::into)
    }
}
