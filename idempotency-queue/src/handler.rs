//! The business work a consumer guards.

use std::fmt;
use std::future::Future;

use crate::Job;

/// What a handler reports when it succeeds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Handled {
    /// The work ran and its effects are committed.
    #[default]
    Done,
    /// The work had already been done (the handler's own record of truth, such as a SQL dedup
    /// row, said so); nothing ran again.
    AlreadyDone,
    /// The handler's own record of truth holds the business key with another payload
    /// ([`Job::fingerprint`] differs); nothing ran. The consumer rejects the message, as it does
    /// when its own store reports the mismatch.
    Mismatch,
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
