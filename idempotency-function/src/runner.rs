//! Running a body once per key: claim, run, store (or release), and replay to duplicates.

use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::Instrument;

use idempotency_core::{Decision, Error, Execution, Idempotency, Outcome, Store, telemetry};

use crate::{Call, FnResult};

/// [`Outcome::status`] of a stored `Ok(T)`.
pub const STATUS_OK: u16 = 0;
/// [`Outcome::status`] of a stored `Err(E)` (only with `on_error = "keep"`).
pub const STATUS_ERR: u16 = 1;

/// Runs `body` once per key: the first call runs it and stores `Ok(T)` (as JSON); a duplicate
/// returns the stored `T` without running it. `Err(E)` releases the key, so a retry runs again.
/// In-flight, mismatch, key, codec and store errors become `E` through `map_err`.
///
/// If the body succeeded but its result could not be stored (store down, lease lost, `T` not
/// encodable), the result is still returned, and the failure is logged and counted: the work
/// was done, and answering with an error would invite a retry.
///
/// Dropping the returned future (a timeout, a `select!`) stops `body` at its await point and
/// releases the key, as an `Err` does: the next call runs `body` again, and what it did before
/// it stopped is not undone. To let a call finish whatever its caller does, spawn it.
pub async fn run<R, S, M, F>(engine: Idempotency<S>, call: Call, map_err: M, body: F) -> R
where
    R: FnResult,
    R::Ok: Serialize + DeserializeOwned,
    S: Store,
    M: FnOnce(Error) -> R::Err,
    F: Future<Output = R>,
{
    let replayed = |outcome: &Outcome| decode(outcome, STATUS_OK).map(Ok);
    run_once(engine, call, map_err, body, replayed, |_| None).await
}

/// Like [`run`], but `Err(E)` is stored and replayed too (attribute `on_error = "keep"`): for
/// errors that are final answers (a declined card), not failures worth a retry.
pub async fn run_keeping_errors<R, S, M, F>(
    engine: Idempotency<S>,
    call: Call,
    map_err: M,
    body: F,
) -> R
where
    R: FnResult,
    R::Ok: Serialize + DeserializeOwned,
    R::Err: Serialize + DeserializeOwned,
    S: Store,
    M: FnOnce(Error) -> R::Err,
    F: Future<Output = R>,
{
    let replayed = |outcome: &Outcome| {
        if outcome.status == STATUS_ERR {
            decode(outcome, STATUS_ERR).map(Err)
        } else {
            decode(outcome, STATUS_OK).map(Ok)
        }
    };
    let kept = |error: &R::Err| Some(serde_json::to_vec(error));
    run_once(engine, call, map_err, body, replayed, kept).await
}

/// What a runner does with the `Err` its body returned: `None` releases the key (a retry runs
/// again); `Some` is its encoding, stored under [`STATUS_ERR`] and replayed.
type KeptError = Option<serde_json::Result<Vec<u8>>>;

/// The path both runners share, in the call's span: claim the key; a duplicate is answered by
/// `replayed` from the stored outcome (a failure to read it through `map_err`); a new claim
/// runs `body`, then stores its `Ok`, or its `Err` where `kept` encodes it, or releases the key.
async fn run_once<R, S, M, F>(
    engine: Idempotency<S>,
    call: Call,
    map_err: M,
    body: F,
    replayed: impl FnOnce(&Outcome) -> Result<Result<R::Ok, R::Err>, Error>,
    kept: impl FnOnce(&R::Err) -> KeptError,
) -> R
where
    R: FnResult,
    R::Ok: Serialize,
    S: Store,
    M: FnOnce(Error) -> R::Err,
    F: Future<Output = R>,
{
    let span = telemetry::function_span(call.scope().namespace());
    async move {
        let execution = match start(engine, call).await {
            Ok(Started::Execute(execution)) => execution,
            Ok(Started::Replay(outcome)) => {
                let replayed = replayed(&outcome).unwrap_or_else(|error| Err(map_err(error)));
                return R::from_result(replayed);
            }
            Err(error) => return R::from_result(Err(map_err(error))),
        };
        let result = body.await.into_result();
        match &result {
            Ok(value) => store(execution, STATUS_OK, serde_json::to_vec(value)).await,
            Err(error) => match kept(error) {
                Some(encoded) => store(execution, STATUS_ERR, encoded).await,
                None => release(execution).await,
            },
        }
        R::from_result(result)
    }
    .instrument(span)
    .await
}

enum Started<S: Store> {
    Execute(Execution<S>),
    Replay(Outcome),
}

async fn start<S: Store>(engine: Idempotency<S>, call: Call) -> Result<Started<S>, Error> {
    match call.begin(engine).await? {
        Decision::Execute(execution) => Ok(Started::Execute(execution)),
        Decision::Replay(outcome) => Ok(Started::Replay(outcome)),
        Decision::InFlight { retry_after } => Err(Error::InFlight { retry_after }),
        Decision::Mismatch => Err(Error::Mismatch),
    }
}

fn decode<T: DeserializeOwned>(outcome: &Outcome, expected: u16) -> Result<T, Error> {
    if outcome.status != expected {
        return Err(Error::Codec(format!(
            "stored status {} is not {expected}: the record was written by another kind of caller",
            outcome.status
        ).into()));
    }
    serde_json::from_slice(&outcome.body)
        .map_err(|error| Error::Codec(format!("stored value: {error}").into()))
}

/// Completes the record with `encoded` under `status`; releases the key where the value could
/// not be encoded.
async fn store<S: Store>(
    execution: Execution<S>,
    status: u16,
    encoded: serde_json::Result<Vec<u8>>,
) {
    match encoded {
        // The engine logs and counts store failures.
        Ok(body) => {
            let _ = execution.complete(Outcome::new(status, body)).await;
        }
        Err(error) => {
            tracing::error!(%error, "the result of an idempotent function is not encodable; releasing the key");
            release(execution).await;
        }
    }
}

async fn release<S: Store>(execution: Execution<S>) {
    // The engine logs and counts store failures; an unreleased key expires with its lease.
    let _ = execution.release().await;
}
