//! A function's steps mode on a SQL store: [`Runner::call`] runs a function with steps once per
//! key, its result stored and replayed, and [`Runner::resume`] drives a stopped call on (the
//! completer).

use idempotency_core::{IdempotencyKey, Mechanism, Outcome, Record, Scope};
use idempotency_sql::StepStore;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::answer::{self, Owned, call_parts, replayed, resume_parts};
use crate::{Answer, CallError, Run, Runner, Start, Started, StepError};

impl<S: StepStore> Owned for Run<S> {
    async fn complete(self, outcome: &Outcome) -> Result<(), StepError> {
        Run::complete(self, outcome).await
    }

    async fn pause(self) {
        Run::pause(self).await
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
        let run = match self.start_waiting(start, self.wait).await? {
            Started::Run(run) => run,
            Started::Replay(outcome) => return replayed(&outcome),
            Started::InFlight(after) => return Err(CallError::InFlight(after)),
            Started::Mismatch => return Err(CallError::Mismatch),
        };
        answer::drive(run, input, steps).await
    }
}
