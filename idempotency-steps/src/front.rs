//! What the front ends (HTTP and gRPC through `idempotency-tower`, queue consumers through
//! `idempotency-queue`, functions) need of a runner, whichever store keeps its runs: one
//! concept, two runners. A SQL store's runs ([`crate::Runner`]) have local and foreign steps; a
//! core store's ([`crate::leased::Runner`], named [`Leased<S>`](crate::leased::Leased) in the
//! front ends' types) have foreign steps under a lease.

use std::future::Future;
use std::time::Duration;

use idempotency_core::{Error, Outcome, Store};

use crate::{RunSource, Start, StepError};

/// What a runner's start found: its run, or the answer without one. Each runner's `Started`
/// names it for its run ([`crate::Started`], [`crate::leased::Started`]).
#[derive(Debug)]
#[must_use = "run the steps only on `Run`"]
// The run is the common answer: boxing it would cost every run an allocation.
#[allow(clippy::large_enum_variant)]
pub enum Found<R> {
    /// This process owns the run: a new one, or one resumed after its last checkpoint.
    Run(R),
    /// The run completed before: its stored answer.
    Replay(Outcome),
    /// A live owner runs it: retry after this long (or wait and start again).
    InFlight(Duration),
    /// The key was used with another payload (or a run of another payload is resumable).
    Mismatch,
}

/// A run this process owns, as a front end drives it to its end once its handler returned.
pub trait OwnedRun: std::fmt::Debug + Send + Sized + 'static {
    /// Whether an earlier owner had checkpointed steps of this run when this one started.
    fn resumed(&self) -> bool;

    /// Stores the answer (compensating first when a step ended the run).
    fn complete(self, outcome: &Outcome) -> impl Future<Output = Result<(), StepError>> + Send;

    /// Leaves the run resumable (a retry or the completer resumes it).
    fn pause(self) -> impl Future<Output = ()> + Send;
}

/// A runner, as the front ends start runs with it: the SQL [`crate::Runner`] or the
/// [`crate::leased::Runner`].
pub trait StepRunner: Clone + Send + Sync + 'static {
    /// The run it owns, which a handler calls its steps on.
    type Run: OwnedRun;
    /// The store its records are on (replays, conflict marks).
    type Store: Store;

    /// Starts or resumes the run `start` names, waiting up to `wait` while a live owner runs
    /// it.
    fn start_waiting(
        &self,
        start: Start<'_>,
        wait: Duration,
    ) -> impl Future<Output = Result<Found<Self::Run>, Error>> + Send;

    /// How long a function's call waits for a live owner's run.
    fn wait(&self) -> Duration;

    /// How long a run's answer is kept.
    fn ttl(&self) -> Duration;

    /// The store.
    fn store(&self) -> &Self::Store;
}

/// What a front end's runs are kept on, as its types name it: every SQL store
/// (`idempotency_sql::StepStore`: `Steps<PostgresStore>` derefs to [`crate::Run`]), or a core
/// store under a lease ([`Leased<S>`](crate::leased::Leased): `Steps<Leased<RedisStore>>`
/// derefs to [`crate::leased::Run`]).
pub trait RunStore: Send + Sync + 'static {
    /// The run a handler holds.
    type Run: OwnedRun;
    /// What starts its runs.
    type Runner: StepRunner<Run = Self::Run>;
    /// Where the completer finds its stopped runs.
    type Source: RunSource;

    /// The completer's source of `runner`'s stopped runs.
    fn source(runner: &Self::Runner) -> Self::Source;
}
