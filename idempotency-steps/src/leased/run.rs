//! One leased run owned by this process: its foreign steps, each checkpointed as it returns,
//! the heartbeat that keeps its lease while a step runs, its compensations and its end.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use idempotency_core::{
    CompleteRequest, Error, Lease, Outcome, Progress, StorageKey, Store, TouchRequest,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::Instrument;

use crate::StepError;
use crate::checkpoints::{self, with_step};

/// The compensation of a foreign step: given its own downstream key (the step's name with
/// `:undo`, [`Run::undo_key`]) and the step's checkpointed result, it asks the other service to
/// undo the step.
pub type Undo = Box<
    dyn FnOnce(
            String,
            serde_json::Value,
        ) -> Pin<Box<dyn Future<Output = Result<(), StepError>> + Send>>
        + Send
        + Sync,
>;

/// A run with steps that this process owns on a core store, under a lease: each step is a
/// foreign call with its downstream key, checkpointed (one round trip) as soon as it returns;
/// a step completed before returns its checkpointed result without running.
///
/// The lease is renewed by each checkpoint and, while a step runs, by a heartbeat every third
/// of the lease; an owner that dies is taken over once its lease ends. End the run with
/// [`complete`](Self::complete) (the answer, stored) or [`pause`](Self::pause) (resumable).
pub struct Run<S: Store> {
    pub(super) store: Arc<S>,
    pub(super) key: StorageKey,
    pub(super) owner: Lease,
    pub(super) lease: Duration,
    pub(super) ttl: Duration,
    /// The checkpoints written so far.
    pub(super) progress: Progress,
    pub(super) undo: Vec<(String, Undo)>,
    /// Whether an earlier owner had checkpointed steps when this one started.
    pub(super) resumed: bool,
}

impl<S: Store> std::fmt::Debug for Run<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("leased::Run")
            .field("key", &self.key)
            .field("owner", &self.owner)
            .field("progress", &self.progress)
            .finish_non_exhaustive()
    }
}

impl<S: Store> Run<S> {
    /// The run's storage key.
    pub fn key(&self) -> &StorageKey {
        &self.key
    }

    /// What the run was started with (kept with its checkpoints, so the completer can resume
    /// it without the client).
    pub fn input(&self) -> &Bytes {
        &self.progress.input
    }

    /// Whether an earlier owner had checkpointed steps of this run when this one started.
    pub fn resumed(&self) -> bool {
        self.resumed
    }

    /// The steps completed so far.
    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    /// The idempotency key a foreign call of `step` sends to the other service: stable across
    /// retries, processes and takeovers ([`StorageKey::downstream`]).
    pub fn downstream_key(&self, step: &str) -> String {
        self.key.downstream(step)
    }

    /// The downstream key of the compensation of `step`.
    pub fn undo_key(&self, step: &str) -> String {
        self.key.downstream(&format!("{step}:undo"))
    }

    /// Runs the foreign step `name`: `call` gets the step's downstream key and calls another
    /// service; its result is checkpointed as soon as it returns (one round trip). A crash
    /// before that checkpoint calls again on resume with the same key, which the other service
    /// deduplicates on. Completed before: its checkpointed result, nothing called.
    /// [`Error::LeaseLost`] if another owner took the run over (the result is then not kept).
    pub async fn foreign<T, F>(&mut self, name: &str, call: F) -> Result<T, StepError>
    where
        T: Serialize + DeserializeOwned,
        F: AsyncFnOnce(&str) -> Result<T, StepError>,
    {
        if let Some(done) = checkpoints::done(&self.progress, &self.progress, name) {
            return done;
        }
        let span = tracing::info_span!("step", step = name, kind = "foreign");
        self.run_foreign(name, call).instrument(span).await
    }

    async fn run_foreign<T, F>(&mut self, name: &str, call: F) -> Result<T, StepError>
    where
        T: Serialize + DeserializeOwned,
        F: AsyncFnOnce(&str) -> Result<T, StepError>,
    {
        let key = self.key.downstream(name);
        match self.beating(call(&key)).await {
            Ok(value) => {
                self.write(with_step(&self.progress, name, &value)?).await?;
                Ok(value)
            }
            Err(StepError::End(answer)) => {
                let ended = checkpoints::ended(&self.progress, name, answer.clone());
                self.write(ended).await?;
                Err(StepError::End(answer))
            }
            Err(error) => {
                metrics::counter!("idempotency_step_failures_total", "step" => name.to_owned())
                    .increment(1);
                Err(error)
            }
        }
    }

    /// Declares how to undo the completed step `name`, should a later step end the run
    /// ([`StepError::End`]): compensations run last step first, each checkpointed, before the
    /// ending answer is stored. Declare it on every attempt, after the step (a resume that
    /// ends the run compensates what earlier owners did too).
    pub fn undo(&mut self, name: &str, undo: Undo) {
        self.undo.push((name.to_owned(), undo));
    }

    /// Stores `outcome` as the run's answer (its checkpoints go with the in-progress record).
    /// When a step ended the run, the declared compensations of the completed steps run first
    /// (each once). [`Error::LeaseLost`] if another owner took the run over meanwhile.
    pub async fn complete(mut self, outcome: &Outcome) -> Result<(), StepError> {
        if self.progress.ending.is_some() {
            self.compensate().await?;
        }
        let request = CompleteRequest {
            key: &self.key,
            token: self.owner.token,
            outcome,
            ttl: self.ttl,
        };
        Ok(self.store.complete(request).await?)
    }

    /// Leaves the run resumable (a step may succeed later): its checkpoints stay and its lease
    /// ends now, in one round trip, so a retry or the completer resumes it at once.
    pub async fn pause(self) {
        if let Err(error) = self.renew(&self.progress, Duration::ZERO).await {
            tracing::warn!(%error, "a paused run's lease could not be ended; it ends on its own");
        }
    }

    /// Runs the declared compensations of completed steps not compensated yet, last first.
    async fn compensate(&mut self) -> Result<(), StepError> {
        let undo = std::mem::take(&mut self.undo);
        for (name, undo) in undo.into_iter().rev() {
            let Some((result, progress)) = checkpoints::to_compensate(&self.progress, &name) else {
                continue;
            };
            self.beating(undo(self.undo_key(&name), result)).await?;
            self.write(progress).await?;
            metrics::counter!("idempotency_step_compensations_total", "step" => name).increment(1);
        }
        Ok(())
    }

    /// Awaits `work`, renewing the lease every third of it meanwhile (a heartbeat that
    /// rewrites the last checkpoint, which also keeps the checkpoints as long as the record).
    /// A heartbeat that fails is logged: the next checkpoint tells whether the run is lost.
    async fn beating<T>(&self, work: impl Future<Output = T>) -> T {
        let every = (self.lease / 3).max(Duration::from_millis(1));
        let mut work = std::pin::pin!(work);
        loop {
            tokio::select! {
                done = &mut work => return done,
                () = tokio::time::sleep(every) => {
                    if let Err(error) = self.renew(&self.progress, self.lease).await {
                        tracing::warn!(%error, "a run's heartbeat failed");
                    }
                }
            }
        }
    }

    /// Writes `progress` (fenced by the run's token), renewing the lease.
    async fn write(&mut self, progress: Progress) -> Result<(), Error> {
        self.renew(&progress, self.lease).await?;
        checkpoints::counted(&progress);
        self.progress = progress;
        Ok(())
    }

    /// `progress` written on the run's record, its lease renewed to `lease` from now.
    async fn renew(&self, progress: &Progress, lease: Duration) -> Result<(), Error> {
        let request = TouchRequest {
            key: &self.key,
            token: self.owner.token,
            lease,
        };
        self.store.checkpoint(request, progress).await
    }
}
