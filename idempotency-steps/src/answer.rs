//! What a function's steps mode answers, whatever runner runs it: a run's result stored and
//! replayed ([`Answer`]), or why there is none ([`CallError`]), and the driving of one run to
//! its end that both runners' `run_once` share.

use idempotency_core::{
    Error, Fingerprint, IdempotencyKey, Mechanism, Outcome, Record, Scope, canonical_json,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{Found, OwnedRun, Start, StepError, StepRunner};

/// The status of a call's stored result: it returned.
const RETURNED: u16 = 0;
/// The status of a call's stored result: a step ended it.
const ENDED: u16 = 1;

/// What `run_once` returned: the run's result, and whether it was the stored one.
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

/// Why a runner's `call` returned no result.
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

/// A runner's `call`: `steps` run once per `key` in `scope` with `input` (its canonical JSON the
/// fingerprint, kept for the completer).
pub(crate) async fn call<T, I, R, F>(
    runner: &T,
    scope: &Scope,
    key: &IdempotencyKey,
    input: I,
    steps: F,
) -> Result<R, CallError>
where
    T: StepRunner,
    I: Serialize,
    R: Serialize + DeserializeOwned,
    F: AsyncFnOnce(&mut T::Run, I) -> Result<R, StepError>,
{
    let kept = serde_json::to_value(&input).map_err(codec)?;
    let fingerprint = Fingerprint::of_bytes(canonical_json(&kept).as_bytes());
    let storage_key = scope.storage_key_for(Mechanism::Function, key.as_str());
    let bytes = serde_json::to_vec(&kept).map_err(codec)?;
    let mut start = Start::new(&storage_key, scope.namespace(), &fingerprint, bytes);
    start.mechanism = Some(Mechanism::Function);
    run_once(runner, start, input, steps)
        .await
        .map(Answer::into_value)
}

/// A runner's `resume`: the stopped run of `record` (as a completer lists it) driven on with
/// its kept input.
pub(crate) async fn resume<T, I, R, F>(
    runner: &T,
    record: &Record,
    steps: F,
) -> Result<R, CallError>
where
    T: StepRunner,
    I: DeserializeOwned,
    R: Serialize + DeserializeOwned,
    F: AsyncFnOnce(&mut T::Run, I) -> Result<R, StepError>,
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
    run_once(runner, start, input, steps)
        .await
        .map(Answer::into_value)
}

/// Runs `steps` once for the run `start` names on `runner` (either runner: what a front end
/// generic over [`StepRunner`] calls; each runner's own `run_once` is this), given `input`:
/// started, or resumed after its last checkpoint, and driven to its end (its answer stored, or
/// left resumable when a step asks to retry), or its stored result (or ending) returned
/// without running anything ([`Answer::replayed`]).
pub async fn run_once<T, I, R, F>(
    runner: &T,
    start: Start<'_>,
    input: I,
    steps: F,
) -> Result<Answer<R>, CallError>
where
    T: StepRunner,
    R: Serialize + DeserializeOwned,
    F: AsyncFnOnce(&mut T::Run, I) -> Result<R, StepError>,
{
    let mut run = match runner.start_waiting(start, runner.wait()).await? {
        Found::Run(run) => run,
        Found::Replay(outcome) => return replayed(&outcome),
        Found::InFlight(after) => return Err(CallError::InFlight(after)),
        Found::Mismatch => return Err(CallError::Mismatch),
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

/// Stores the call's answer (compensating first when a step ended it).
async fn finish<O: OwnedRun>(run: O, outcome: &Outcome) -> Result<(), CallError> {
    run.complete(outcome).await.map_err(|error| match error {
        StepError::Store(error) => CallError::Store(error),
        StepError::Retry(reason) => CallError::Retry(reason),
        StepError::End(answer) => CallError::Ended(answer),
    })
}

/// The stored result of a completed call, replayed.
fn replayed<R: DeserializeOwned>(outcome: &Outcome) -> Result<Answer<R>, CallError> {
    let value = match outcome.status {
        ENDED => {
            return Err(CallError::Ended(
                serde_json::from_slice(&outcome.body).map_err(codec)?,
            ));
        }
        _ => serde_json::from_slice(&outcome.body).map_err(codec)?,
    };
    Ok(Answer {
        value,
        replayed: true,
    })
}

fn codec(error: serde_json::Error) -> Error {
    Error::Codec(format!("a call's input or result: {error}").into())
}
