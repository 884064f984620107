//! One run with steps, owned by this process: its steps, checkpoints, compensations and end.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use idempotency_core::{Error, Lease, Outcome, Progress, StorageKey};
use idempotency_sql::StepStore;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::pool::PoolConnection;
use tracing::Instrument;

use crate::StepError;
use crate::checkpoints::{self, with_step};
use crate::tx::{Connection, Db, StepTx};

/// The compensation of a local step: given a connection inside the compensation's own
/// transaction and the step's checkpointed result, it undoes the step's writes.
pub type Undo<S> = Box<
    dyn for<'c> FnOnce(
            &'c mut Connection<S>,
            serde_json::Value,
        ) -> Pin<Box<dyn Future<Output = Result<(), StepError>> + Send + 'c>>
        + Send,
>;

/// A run with steps that this process owns: it holds the run's key on its own connection
/// (so a retry elsewhere waits while it lives, and takes over at once when it dies), runs each
/// step not completed yet, and checkpoints each result on the record.
///
/// Steps are called in the same order on every attempt; a step completed before (by this
/// process or one that died) returns its checkpointed result without running. End the run with
/// [`complete`](Self::complete) (the answer, stored) or [`pause`](Self::pause) (resumable).
pub struct Run<S: StepStore> {
    pub(crate) store: S,
    pub(crate) conn: PoolConnection<Db<S>>,
    pub(crate) key: StorageKey,
    pub(crate) owner: Lease,
    pub(crate) lease: Duration,
    pub(crate) ttl: Duration,
    /// The checkpoints committed so far.
    pub(crate) progress: Progress,
    /// The progress with the steps whose checkpoints are not written yet: the open local
    /// step's, a foreign step's.
    pub(crate) pending: Option<Progress>,
    /// Whether a local step's transaction is open on the connection.
    pub(crate) in_step: bool,
    pub(crate) undo: Vec<(String, Undo<S>)>,
    pub(crate) held: bool,
    /// Whether an earlier owner had checkpointed steps when this one started.
    pub(crate) resumed: bool,
}

impl<S: StepStore> std::fmt::Debug for Run<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run")
            .field("key", &self.key)
            .field("owner", &self.owner)
            .field("progress", &self.progress)
            .finish_non_exhaustive()
    }
}

impl<S: StepStore> Run<S> {
    /// The run's storage key.
    pub fn key(&self) -> &StorageKey {
        &self.key
    }

    /// What the run was started with (kept with its first checkpoint, so the completer can
    /// resume it without the client).
    pub fn input(&self) -> &Bytes {
        &self.progress.input
    }

    /// Whether an earlier owner had checkpointed steps of this run when this one started (a
    /// retry or a takeover resumes it).
    pub fn resumed(&self) -> bool {
        self.resumed
    }

    /// The steps completed so far, with those whose checkpoints are not written yet.
    pub fn progress(&self) -> &Progress {
        self.pending.as_ref().unwrap_or(&self.progress)
    }

    /// The idempotency key a foreign call of `step` sends to the other service: stable across
    /// retries, processes and takeovers ([`StorageKey::downstream`]).
    pub fn downstream_key(&self, step: &str) -> String {
        self.key.downstream(step)
    }

    /// Runs the local step `name` in its own transaction on the business database: `step`
    /// writes through the transaction it is given ([`StepTx`]), and its result is
    /// checkpointed in the same transaction, so its writes and its checkpoint commit together.
    /// Completed before: its checkpointed result, nothing run.
    ///
    /// The transaction commits when the next step starts, or with the run's answer
    /// ([`complete`](Self::complete)), which then costs no transaction of its own;
    /// [`commit`](Self::commit) commits it at once. A run dropped before rolls the step back.
    pub async fn local<T, F>(&mut self, name: &str, step: F) -> Result<T, StepError>
    where
        T: Serialize + DeserializeOwned,
        F: AsyncFnOnce(&mut StepTx<'_, S>) -> Result<T, StepError>,
    {
        if let Some(done) = self.done(name) {
            return done;
        }
        if self.in_step {
            self.commit().await?;
        }
        let span = tracing::info_span!("step", step = name, kind = "local");
        self.run_local(name, step).instrument(span).await
    }

    async fn run_local<T, F>(&mut self, name: &str, step: F) -> Result<T, StepError>
    where
        T: Serialize + DeserializeOwned,
        F: AsyncFnOnce(&mut StepTx<'_, S>) -> Result<T, StepError>,
    {
        self.store.begin_on(&mut self.conn).await?;
        self.in_step = true;
        let mut tx = StepTx {
            conn: &mut *self.conn,
        };
        let done = match step(&mut tx).await {
            Ok(value) => with_step(self.progress(), name, &value).map(|next| (value, next)),
            Err(error) => Err(error),
        };
        match done {
            Ok((value, next)) => {
                self.pending = Some(next);
                Ok(value)
            }
            Err(error) => {
                self.in_step = false;
                let _ = self.store.rollback_on(&mut self.conn).await;
                self.failed(name, error).await
            }
        }
    }

    /// Writes the checkpoints not written yet (the open local step's, a foreign step's) and
    /// commits the open local step's transaction, now rather than with the next step or the
    /// answer (a drill that stops the process after a step does). Nothing pending: nothing
    /// done. On an error the open step is rolled back: a retry runs it again.
    pub async fn commit(&mut self) -> Result<(), StepError> {
        let Some(progress) = self.pending.take() else {
            return Ok(());
        };
        let in_step = std::mem::take(&mut self.in_step);
        let written = async {
            self.write(&progress).await?;
            if in_step {
                self.store.commit_on(&mut self.conn).await?;
            }
            Ok::<_, Error>(())
        }
        .await;
        if let Err(error) = written {
            if in_step {
                let _ = self.store.rollback_on(&mut self.conn).await;
            }
            return Err(error.into());
        }
        checkpoints::counted(&progress);
        self.progress = progress;
        Ok(())
    }

    /// Runs the foreign step `name`: `call` gets the step's downstream key and calls another
    /// service outside any transaction. Its result is checkpointed with the next local step's
    /// transaction, or alone when the next step is foreign, or the run pauses or fails (the
    /// answer needs none). A crash before that checkpoint calls again on resume with the same
    /// key, which the other service deduplicates on. Completed before: its checkpointed result,
    /// nothing called.
    pub async fn foreign<T, F>(&mut self, name: &str, call: F) -> Result<T, StepError>
    where
        T: Serialize + DeserializeOwned,
        F: AsyncFnOnce(&str) -> Result<T, StepError>,
    {
        if let Some(done) = self.done(name) {
            return done;
        }
        self.commit().await?;
        let span = tracing::info_span!("step", step = name, kind = "foreign");
        self.run_foreign(name, call).instrument(span).await
    }

    async fn run_foreign<T, F>(&mut self, name: &str, call: F) -> Result<T, StepError>
    where
        T: Serialize + DeserializeOwned,
        F: AsyncFnOnce(&str) -> Result<T, StepError>,
    {
        let key = self.key.downstream(name);
        let value = match call(&key).await {
            Ok(value) => value,
            Err(error) => return self.failed(name, error).await,
        };
        self.pending = Some(with_step(&self.progress, name, &value)?);
        Ok(value)
    }

    /// Declares how to undo the completed local step `name`, should a later step end the run
    /// ([`StepError::End`]): compensations run last step first, each in its own transaction
    /// with its checkpoint, before the ending answer is stored. Declare it on every attempt,
    /// after the step (a resume that ends the run compensates what earlier owners did too).
    pub fn undo(&mut self, name: &str, undo: Undo<S>) {
        self.undo.push((name.to_owned(), undo));
    }

    /// Stores `outcome` as the run's answer and gives the run's key back: in the last local
    /// step's transaction when it is still open, so the step and the answer commit together
    /// (the answer supersedes the checkpoints not written yet). When a step ended the run, the
    /// declared compensations of the completed steps run first (each once).
    /// [`Error::LeaseLost`] if another owner took the run over meanwhile.
    pub async fn complete(mut self, outcome: &Outcome) -> Result<(), StepError> {
        if self.progress.ending.is_some() {
            self.compensate().await?;
        }
        self.pending = None;
        let in_step = std::mem::take(&mut self.in_step);
        let stored = self
            .store
            .complete_unhold_on(
                &mut self.conn,
                &self.key,
                self.owner.token,
                outcome,
                self.ttl,
            )
            .await;
        let stored = match stored {
            Ok(()) if in_step => self.store.commit_on(&mut self.conn).await,
            other => other,
        };
        if let Err(error) = stored {
            if in_step {
                // The step and the answer roll back together; the hold may be given back
                // already (it is not transactional), and is otherwise closed with the
                // connection.
                let _ = self.store.rollback_on(&mut self.conn).await;
            }
            return Err(error.into());
        }
        self.held = false;
        Ok(())
    }

    /// Leaves the run resumable (a step may succeed later): its checkpoints stay, its lease
    /// ends now and its key is given back, so a retry or the completer resumes it at once.
    pub async fn pause(mut self) {
        if let Err(error) = self.commit().await {
            tracing::warn!(%error, "a paused run's last steps could not be checkpointed; they run again");
        }
        if let Err(error) = self.store.expire_on(&mut self.conn, &self.key).await {
            tracing::warn!(%error, "a paused run's lease could not be ended; it ends on its own");
        }
        self.give_back().await;
    }

    /// The checkpointed result (or ending) of step `name`, if it completed before.
    fn done<T: DeserializeOwned>(&self, name: &str) -> Option<Result<T, StepError>> {
        checkpoints::done(&self.progress, self.progress(), name)
    }

    /// A step that failed: an ending is checkpointed (alone) before it is returned.
    async fn failed<T>(&mut self, name: &str, error: StepError) -> Result<T, StepError> {
        let StepError::End(answer) = error else {
            metrics::counter!("idempotency_step_failures_total", "step" => name.to_owned())
                .increment(1);
            // A foreign step's result not written yet is kept, so a resume does not call again.
            if let Err(written) = self.commit().await {
                tracing::warn!(error = %written, "a failed run's last checkpoint could not be written");
            }
            return Err(error);
        };
        let progress = checkpoints::ended(self.progress(), name, answer.clone());
        self.pending = None;
        self.write(&progress).await?;
        self.progress = progress;
        Err(StepError::End(answer))
    }

    /// Runs the declared compensations of completed steps not compensated yet, last first.
    async fn compensate(&mut self) -> Result<(), StepError> {
        let undo = std::mem::take(&mut self.undo);
        for (name, undo) in undo.into_iter().rev() {
            let Some((result, progress)) = checkpoints::to_compensate(&self.progress, &name) else {
                continue;
            };
            self.store.begin_on(&mut self.conn).await?;
            let undone = async {
                undo(&mut self.conn, result).await?;
                self.write(&progress).await?;
                Ok::<_, StepError>(self.store.commit_on(&mut self.conn).await?)
            }
            .await;
            if let Err(error) = undone {
                let _ = self.store.rollback_on(&mut self.conn).await;
                return Err(error);
            }
            self.progress = progress;
            metrics::counter!("idempotency_step_compensations_total", "step" => name).increment(1);
        }
        Ok(())
    }

    /// Writes `progress` on the run's record (fenced by its token), renewing its lease.
    async fn write(&mut self, progress: &Progress) -> Result<(), Error> {
        self.store
            .checkpoint_on(
                &mut self.conn,
                &self.key,
                self.owner.token,
                progress,
                self.lease,
            )
            .await
    }

    /// Gives the run's key back; a connection whose hold could not be given back is closed.
    async fn give_back(&mut self) {
        match self.store.unhold(&mut self.conn, &self.key).await {
            Ok(()) => self.held = false,
            Err(error) => tracing::warn!(%error, "a run's hold could not be given back"),
        }
    }
}

impl<S: StepStore> Drop for Run<S> {
    fn drop(&mut self) {
        if self.held {
            // The hold must not outlive the run on a pooled connection: closed, the
            // connection takes it along (SQLite's is forgotten in the process).
            self.conn.close_on_drop();
            self.store.forget_hold(&self.key);
        }
    }
}
