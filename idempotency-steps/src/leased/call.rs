//! A function's steps mode on a core store: [`Runner::call`], [`Runner::resume`] and
//! [`Runner::run_once`], as the SQL runner's, with leased runs.

use idempotency_core::{IdempotencyKey, Mechanism, Outcome, Record, Scope, Store};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Run, Runner, Started};
use crate::answer::{self, Owned, call_parts, replayed, resume_parts};
use crate::{Answer, CallError, Start, StepError};

impl<S: Store> Owned for Run<S> {
    async fn complete(self, outcome: &Outcome) -> Result<(), StepError> {
        Run::complete(self, outcome).await
    }

    async fn pause(self) {
        Run::pause(self).await
    }
}

impl<S: Store> Runner<S> {
    /// Runs `steps` once per `key` in `scope` with `input`: a new key runs it; a key whose
    /// earlier call stopped part-way (its owner died, or a step asked to retry) resumes after
    /// the last checkpoint; a completed key returns the stored result (or ending) without
    /// running anything. The input is the call's fingerprint (canonical JSON) and is kept for
    /// the completer ([`resume`](Self::resume)).
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
        let (storage_key, fingerprint, bytes) = call_parts(scope, key, &input)?;
        let mut start = Start::new(&storage_key, scope.namespace(), &fingerprint, bytes);
        start.mechanism = Some(Mechanism::Function);
        self.run_once(start, input, steps)
            .await
            .map(Answer::into_value)
    }

    /// Drives on the stopped call of `record` (as the [`Completer`](crate::Completer) lists
    /// it) with its kept input: what the same `steps` as [`call`](Self::call)'s do next.
    pub async fn resume<I, R, F>(&self, record: &Record, steps: F) -> Result<R, CallError>
    where
        I: DeserializeOwned,
        R: Serialize + DeserializeOwned,
        F: AsyncFnOnce(&mut Run<S>, I) -> Result<R, StepError>,
    {
        let (start, input) = resume_parts(record)?;
        self.run_once(start, input, steps)
            .await
            .map(Answer::into_value)
    }

    /// Runs `steps` once for the run `start` names, given `input`: started, resumed after its
    /// last checkpoint, or its stored result (or ending) returned without running anything
    /// ([`Answer::replayed`]). Waits for a live owner's run up to the runner's wait.
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
        let run = match self.start_waiting(start, self.wait).await? {
            Started::Run(run) => run,
            Started::Replay(outcome) => return replayed(&outcome),
            Started::InFlight(after) => return Err(CallError::InFlight(after)),
            Started::Mismatch => return Err(CallError::Mismatch),
        };
        answer::drive(run, input, steps).await
    }
}
