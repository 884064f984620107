//! What every run does with its checkpoints, whatever store keeps them: a completed step's
//! result read back, a step's result or ending added, a compensation marked, the input kept.

use bytes::Bytes;
use idempotency_core::{Ending, Error, Progress, StepResult};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::StepError;

/// The checkpointed result (or ending) of step `name`, if it completed before: `committed` is
/// what the store holds, `current` the same with the checkpoints not written yet.
pub(crate) fn done<T: DeserializeOwned>(
    committed: &Progress,
    current: &Progress,
    name: &str,
) -> Option<Result<T, StepError>> {
    if let Some(ending) = &committed.ending
        && ending.step == name
    {
        return Some(Err(StepError::End(ending.answer.clone())));
    }
    let step = current.step(name)?;
    Some(
        serde_json::from_value(step.result.clone()).map_err(|error| {
            StepError::Store(Error::Codec(
                format!("the checkpoint of step {name:?} does not decode: {error}").into(),
            ))
        }),
    )
}

/// `progress` with step `name` completed with `value`.
pub(crate) fn with_step<T: Serialize>(
    progress: &Progress,
    name: &str,
    value: &T,
) -> Result<Progress, StepError> {
    let result = serde_json::to_value(value).map_err(|error| {
        StepError::Store(Error::Codec(
            format!("the result of step {name:?} does not encode: {error}").into(),
        ))
    })?;
    let mut progress = progress.clone();
    progress.steps.push(StepResult::new(name, result));
    Ok(progress)
}

/// `progress` ended at step `name` with `answer`.
pub(crate) fn ended(progress: &Progress, name: &str, answer: serde_json::Value) -> Progress {
    let mut progress = progress.clone();
    progress.ending = Some(Ending {
        step: name.to_owned(),
        answer,
    });
    progress
}

/// The result of step `name` and `progress` with its compensation marked done, if the step
/// completed and is not compensated yet.
pub(crate) fn to_compensate(
    progress: &Progress,
    name: &str,
) -> Option<(serde_json::Value, Progress)> {
    let step = progress.step(name).filter(|step| !step.compensated)?;
    let result = step.result.clone();
    let mut next = progress.clone();
    if let Some(step) = next.steps.iter_mut().find(|step| step.name == name) {
        step.compensated = true;
    }
    Some((result, next))
}

/// The input kept for a resume: `input` if within `max` bytes.
pub(crate) fn kept(input: &Bytes, max: usize) -> Bytes {
    if input.len() <= max {
        input.clone()
    } else {
        tracing::warn!(
            bytes = input.len(),
            max,
            "a run's input is too large to keep: only the client's retry can resume it"
        );
        Bytes::new()
    }
}

/// The progress an earlier owner checkpointed, as the new owner (attempt `attempt`) resumes
/// it: counted and logged.
pub(crate) fn resumed(progress: Progress, namespace: &str, attempt: u32) -> Progress {
    metrics::counter!("idempotency_runs_resumed_total", "namespace" => namespace.to_owned())
        .increment(1);
    tracing::info!(
        attempt,
        stopped_at = progress.stopped_at().unwrap_or(""),
        "resuming a run after its last checkpoint"
    );
    progress
}

/// Counts a checkpoint of `progress`'s last step.
pub(crate) fn counted(progress: &Progress) {
    let step = progress.stopped_at().unwrap_or_default().to_owned();
    metrics::counter!("idempotency_step_checkpoints_total", "step" => step).increment(1);
}
