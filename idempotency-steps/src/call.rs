//! A function's steps mode: [`Runner::call`] runs a function with steps once per key, its
//! result stored and replayed, and [`Runner::resume`] drives a stopped call on (the completer).

use idempotency_core::{
    Error, Fingerprint, IdempotencyKey, Mechanism, Outcome, Record, Scope, canonical_json,
};
use idempotency_sql::StepStore;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{Run, Runner, Start, Started, StepError};

/// The status of a call's stored result: it returned.
const RETURNED: u16 = 0;
/// The status of a call's stored result: a step ended it.
const ENDED: u16 = 1;

/// What [`Runner::run_once`] returned: the run's result, and whether it was the stored one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer<R> {
    /// The result.
    pub value: R,
    /// Whether the run had completed before (nothing ran: the stored result).
    pub replayed: bool,
}

impl<R> Answer<R> {
    /// The result.
    pub fn into_value(self) -> R {
        self.value
    }
}

/// Why [`Runner::call`] returned no result.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// A step ended the call with this answer (stored: every later call with the key gets it).
    #[error("a step ended the call: {0}")]
    Ended(serde_json::Value),
    /// A step may succeed later: the call stopped after its last checkpoint, and the next call
    /// with the key (or the completer) resumes it.
    #[error("the call stopped and resumes later: {0}")]
    Retry(String),
    /// Another caller runs the key now.
    #[error("another caller runs this key; retry after {0:?}")]
    InFlight(std::time::Duration),
    /// The key was used with another input.
    #[error("the key was used with another input")]
    Mismatch,
    /// The store failed, or the stored result does not decode.
    #[error(transparent)]
    Store(#[from] Error),
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
        let kept = serde_json::to_value(&input).map_err(codec)?;
        let fingerprint = Fingerprint::of_bytes(canonical_json(&kept).as_bytes());
        let storage_key = scope.storage_key_for(Mechanism::Function, key.as_str());
        let bytes = serde_json::to_vec(&kept).map_err(codec)?;
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
        let kept = record
            .progress
            .as_ref()
            .map(|progress| progress.input.clone());
        let input: I = serde_json::from_slice(&kept.unwrap_or_default()).map_err(codec)?;
        let mut start = Start::new(
            &record.key,
            &record.namespace,
            &record.fingerprint,
            Vec::new(),
        );
        start.mechanism = record.mechanism;
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
        let mut run = match self.start_waiting(start, self.wait).await? {
            Started::Run(run) => run,
            Started::Replay(outcome) => {
                return stored(&outcome).map(|value| Answer {
                    value,
                    replayed: true,
                });
            }
            Started::InFlight(after) => return Err(CallError::InFlight(after)),
            Started::Mismatch => return Err(CallError::Mismatch),
        };
        match steps(&mut run, input).await {
            Ok(result) => {
                let body = serde_json::to_vec(&result).map_err(codec)?;
                finish(run, &Outcome::new(RETURNED, body)).await?;
                Ok(Answer {
                    value: result,
                    replayed: false,
                })
            }
            Err(StepError::End(answer)) => {
                let body = serde_json::to_vec(&answer).map_err(codec)?;
                finish(run, &Outcome::new(ENDED, body)).await?;
                Err(CallError::Ended(answer))
            }
            Err(StepError::Retry(reason)) => {
                run.pause().await;
                Err(CallError::Retry(reason))
            }
            Err(StepError::Store(error)) => {
                run.pause().await;
                Err(CallError::Store(error))
            }
        }
    }
}

/// Stores the call's answer (compensating first when a step ended it).
async fn finish<S: StepStore>(run: Run<S>, outcome: &Outcome) -> Result<(), CallError> {
    run.complete(outcome).await.map_err(|error| match error {
        StepError::Store(error) => CallError::Store(error),
        StepError::Retry(reason) => CallError::Retry(reason),
        StepError::End(answer) => CallError::Ended(answer),
    })
}

/// The stored result of a completed call.
fn stored<R: DeserializeOwned>(outcome: &Outcome) -> Result<R, CallError> {
    match outcome.status {
        ENDED => Err(CallError::Ended(
            serde_json::from_slice(&outcome.body).map_err(codec)?,
        )),
        _ => Ok(serde_json::from_slice(&outcome.body).map_err(codec)?),
    }
}

fn codec(error: serde_json::Error) -> Error {
    Error::Codec(format!("a call's input or result: {error}").into())
}
