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
    let span = telemetry::function_span(call.scope().namespace());
    async move {
        let execution = match start(engine, call).await {
            Ok(Started::Execute(execution)) => execution,
            Ok(Started::Replay(outcome)) => {
                return R::from_result(decode::<R::Ok>(&outcome, STATUS_OK).map_err(map_err));
            }
            Err(error) => return R::from_result(Err(map_err(error))),
        };
        let result = body.await.into_result();
        match &result {
            Ok(value) => store(execution, STATUS_OK, value).await,
            Err(_) => release(execution).await,
        }
        R::from_result(result)
    }
    .instrument(span)
    .await
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
    let span = telemetry::function_span(call.scope().namespace());
    async move {
        let execution = match start(engine, call).await {
            Ok(Started::Execute(execution)) => execution,
            Ok(Started::Replay(outcome)) => {
                let replayed = if outcome.status == STATUS_ERR {
                    decode::<R::Err>(&outcome, STATUS_ERR).map(Err)
                } else {
                    decode::<R::Ok>(&outcome, STATUS_OK).map(Ok)
                };
                return R::from_result(replayed.unwrap_or_else(|error| Err(map_err(error))));
            }
            Err(error) => return R::from_result(Err(map_err(error))),
        };
        let result = body.await.into_result();
        match &result {
            Ok(value) => store(execution, STATUS_OK, value).await,
            Err(error) => store(execution, STATUS_ERR, error).await,
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

async fn store<S: Store, T: Serialize>(execution: Execution<S>, status: u16, value: &T) {
    match serde_json::to_vec(value) {
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
