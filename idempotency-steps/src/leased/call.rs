//! A function's steps mode on a core store: [`Runner::call`], [`Runner::resume`] and
//! [`Runner::run_once`], as the SQL runner's, with leased runs.

use idempotency_core::{Error, IdempotencyKey, Outcome, Record, Scope, Store};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Run, Runner, Started};
use crate::answer::{self, Found, Owned, Starts};
use crate::{Answer, CallError, Start, StepError};

impl<S: Store> Owned for Run<S> {
    async fn complete(self, outcome: &Outcome) -> Result<(), StepError> {
        Run::complete(self, outcome).await
    }

    async fn pause(self) {
        Run::pause(self).await
    }
}

impl<S: Store> Starts for Runner<S> {
    type Run = Run<S>;

    async fn start_call(&self, start: Start<'_>) -> Result<Found<Run<S>>, Error> {
        Ok(match self.start_waiting(start, self.wait).await? {
            Started::Run(run) => Found::Run(run),
            Started::Replay(outcome) => Found::Replay(outcome),
            Started::InFlight(after) => Found::InFlight(after),
            Started::Mismatch => Found::Mismatch,
        })
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
