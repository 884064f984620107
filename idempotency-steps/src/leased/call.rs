//! A function's steps mode on a core store: [`Runner::call`], [`Runner::resume`] and
//! [`Runner::run_once`], as the SQL runner's, with leased runs; and the leased runner as every
//! front end starts its runs ([`StepRunner`], [`RunStore`] for [`Leased`]).

use std::sync::Arc;
use std::time::Duration;

use idempotency_core::{Error, IdempotencyKey, Outcome, Record, Scope, Store};
use idempotency_operations::Operations;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Abandoned, Leased, Run, Runner, Started};
use crate::answer;
use crate::{Answer, CallError, OwnedRun, RunStore, Start, StepError, StepRunner};

impl<S: Store> OwnedRun for Run<S> {
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

impl<S: Store> StepRunner for Runner<S> {
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

/// A core store under a lease keeps runs with foreign steps; the completer finds them by the
/// store's record scan ([`Abandoned`]).
impl<S: Store + Operations> RunStore for Leased<S> {
    type Run = Run<S>;
    type Runner = Runner<S>;
    type Source = Abandoned<Arc<S>>;

    fn source(runner: &Runner<S>) -> Abandoned<Arc<S>> {
        Abandoned::new(runner.shared_store())
    }
}

impl<S: Store> Runner<S> {
    /// Runs `steps` once per `key` in `scope` with `input`: a new key runs it; a key whose
    /// earlier call stopped part-way (its owner died, or a step asked to retry) resumes after
    /// the last checkpoint; a completed key returns the stored result (or ending) without
    /// running anything. The input is the call's fingerprint (canonical JSON) and is kept for
    /// the completer ([`resume`](Self::resume)). Waits for a live owner's run up to the
    /// runner's wait ([`with_wait`](Self::with_wait)).
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

    /// Runs `steps` once for the run `start` names, given `input`: started, resumed after its
    /// last checkpoint, or its stored result (or ending) returned without running anything
    /// ([`Answer::replayed`]).
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
