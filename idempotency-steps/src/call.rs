//! A function's steps mode on a SQL store: [`Runner::call`] runs a function with steps once per
//! key, its result stored and replayed, and [`Runner::resume`] drives a stopped call on (the
//! completer); and the SQL runner as every front end starts its runs ([`StepRunner`],
//! [`RunStore`]).

use std::time::Duration;

use idempotency_core::{Error, IdempotencyKey, Outcome, Record, Scope};
use idempotency_sql::StepStore;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::answer;
use crate::{
    Answer, CallError, OwnedRun, Run, RunStore, Runner, Start, Started, StepError, StepRunner,
};

impl<S: StepStore> OwnedRun for Run<S> {
    fn resumed(&self) -> bool {
        Run::resumed(self)
    }

    async fn complete(self, outcome: &Outcome) -> Result<(), StepError> {
        Run::complete(self, outcome).await
    }

    async fn pause(self) {
        Run::pause(self).await
    }
}

impl<S: StepStore> StepRunner for Runner<S> {
    type Run = Run<S>;
    type Store = S;

    async fn start_waiting(&self, start: Start<'_>, wait: Duration) -> Result<Started<S>, Error> {
        Runner::start_waiting(self, start, wait).await
    }

    fn wait(&self) -> Duration {
        self.wait
    }

    fn ttl(&self) -> Duration {
        Runner::ttl(self)
    }

    fn store(&self) -> &S {
        Runner::store(self)
    }
}

/// Every SQL store keeps runs with local and foreign steps; the completer finds them in it.
impl<S: StepStore> RunStore for S {
    type Run = Run<S>;
    type Runner = Runner<S>;
    type Source = S;

    fn source(runner: &Runner<S>) -> S {
        runner.store().clone()
    }
}

impl<S: StepStore> Runner<S> {
    /// Runs `steps` once per `key` in `scope` with `input` (a function's steps mode): a new key
    /// runs it; a key whose earlier call stopped part-way (its process died, or a step asked to
    /// retry) resumes after the last checkpoint; a completed key returns the stored result (or
    /// ending) without running anything. The input is the call's fingerprint (canonical JSON)
    /// and is kept for the completer ([`resume`](Self::resume)).
    ///
    /// The toolkit opens each local step's transaction ([`Run::local`]); a transaction of the
    /// caller's cannot hold a call with steps, which commits at every checkpoint.
    pub async fn call<I, R, F>(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        input: I,
        steps: F,
    ) -> Result<R, CallError>
    where
        I: Serialize,
        R: Serialize + DeserializeOwned,
        F: AsyncFnOnce(&mut Run<S>, I) -> Result<R, StepError>,
    {
        answer::call(self, scope, key, input, steps).await
    }

    /// Drives on the stopped call of `record` (as the [`Completer`](crate::Completer) lists
    /// it) with its kept input: what the same `steps` as [`call`](Self::call)'s do next.
    pub async fn resume<I, R, F>(&self, record: &Record, steps: F) -> Result<R, CallError>
    where
        I: DeserializeOwned,
        R: Serialize + DeserializeOwned,
        F: AsyncFnOnce(&mut Run<S>, I) -> Result<R, StepError>,
    {
        answer::resume(self, record, steps).await
    }

    /// Runs `steps` once for the run `start` names (its key, fingerprint and kept input, as
    /// the front end derives them: [`call`](Self::call) for functions, a consumer's handler for
    /// messages), given `input`: started, resumed after its last checkpoint, or its stored
    /// result (or ending) returned without running anything ([`Answer::replayed`]).
    pub async fn run_once<I, R, F>(
        &self,
        start: Start<'_>,
        input: I,
        steps: F,
    ) -> Result<Answer<R>, CallError>
    where
        R: Serialize + DeserializeOwned,
        F: AsyncFnOnce(&mut Run<S>, I) -> Result<R, StepError>,
    {
        answer::run_once(self, start, input, steps).await
    }
}
