//! The completer: runs that stopped part-way, with no client retrying, driven to completion in
//! the background by any instance.

use std::future::Future;
use std::time::Duration;

use idempotency_core::{Error, Record};
use tracing::Instrument;

/// How many runs one sweep resumes at most, by default.
pub const DEFAULT_COMPLETER_BATCH: usize = 32;

/// After how many owners (attempts) a run is left to operators, by default: a step that can
/// never succeed stops being retried, and the run is counted as stuck.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 10;

/// Where a [`Completer`] finds the runs to resume: a SQL store lists the in-progress records
/// with checkpoints (every `idempotency_sql::StepStore` is a source); a core
/// store's runs are found by its record scan ([`leased::Abandoned`](crate::leased::Abandoned)).
pub trait RunSource: Send + Sync + 'static {
    /// Up to `limit` runs of `namespace` that stopped part-way, with their checkpoints (least
    /// recently written first).
    fn resumable(
        &self,
        namespace: &str,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Record>, Error>> + Send;
}

#[cfg(feature = "sql")]
impl<S: idempotency_sql::StepStore> RunSource for S {
    fn resumable(
        &self,
        namespace: &str,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Record>, Error>> + Send {
        idempotency_sql::StepStore::resumable(self, namespace, limit)
    }
}

/// Finds the runs of one namespace that stopped part-way (their owner died, or paused on a
/// step that may succeed later) and resumes each through the front end's `resume`, which
/// starts it as a retry would ([`Runner::start`](crate::Runner::start),
/// [`leased::Runner::start`](crate::leased::Runner::start)): a run whose owner is alive is left
/// to it, a completed step never runs again, and a run resumed elsewhere meanwhile is fenced
/// out. `S` is where the runs are found ([`RunSource`]): a SQL store, or
/// [`leased::Abandoned`](crate::leased::Abandoned) around a core store.
///
/// Bounded: at most [`DEFAULT_COMPLETER_BATCH`] runs a sweep, one at a time; a run after
/// [`DEFAULT_MAX_ATTEMPTS`] owners is left to operators (`idempotency_runs_stuck` counts them,
/// the CLI and the admin API show the step each stopped at).
#[derive(Clone, Debug)]
pub struct Completer<S> {
    store: S,
    namespace: String,
    batch: usize,
    max_attempts: u32,
}

/// What one sweep did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sweep {
    /// Runs handed to `resume`.
    pub resumed: usize,
    /// Runs left to operators (too many attempts).
    pub stuck: usize,
}

impl<S: RunSource> Completer<S> {
    /// The completer of `namespace`'s runs found in `store`.
    pub fn new(store: S, namespace: impl Into<String>) -> Self {
        Self {
            store,
            namespace: namespace.into(),
            batch: DEFAULT_COMPLETER_BATCH,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
        }
    }

    /// At most `batch` runs a sweep.
    pub fn with_batch(mut self, batch: usize) -> Self {
        self.batch = batch.max(1);
        self
    }

    /// Leaves a run to operators after `attempts` owners.
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// One sweep: each resumable run (oldest checkpoint first) goes to `resume`.
    pub async fn sweep<F, Fut>(&self, resume: F) -> Result<Sweep, Error>
    where
        F: FnMut(Record) -> Fut,
        Fut: Future<Output = ()>,
    {
        let span = tracing::info_span!("completer.sweep", namespace = %self.namespace);
        self.sweep_batch(resume).instrument(span).await
    }

    async fn sweep_batch<F, Fut>(&self, mut resume: F) -> Result<Sweep, Error>
    where
        F: FnMut(Record) -> Fut,
        Fut: Future<Output = ()>,
    {
        let records = RunSource::resumable(&self.store, &self.namespace, self.batch).await?;
        let mut sweep = Sweep::default();
        for record in records {
            if record.attempts >= self.max_attempts {
                sweep.stuck += 1;
                continue;
            }
            sweep.resumed += 1;
            resume(record).await;
        }
        metrics::gauge!("idempotency_runs_stuck", "namespace" => self.namespace.clone())
            .set(sweep.stuck as f64);
        metrics::counter!("idempotency_completer_resumes_total", "namespace" => self.namespace.clone())
            .increment(sweep.resumed as u64);
        if sweep.resumed > 0 {
            tracing::info!(
                resumed = sweep.resumed,
                stuck = sweep.stuck,
                "completer swept"
            );
        }
        Ok(sweep)
    }

    /// Sweeps every `interval` in a task of its own until the task is aborted.
    pub fn spawn<F, Fut>(self, interval: Duration, mut resume: F) -> tokio::task::JoinHandle<()>
    where
        S: 'static,
        F: FnMut(Record) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send,
    {
        tokio::spawn(async move {
            // The first sweep comes one interval after the start, not at once: a client's retry
            // right after a restart resumes its own run.
            let first = tokio::time::Instant::now() + interval;
            let mut ticks = tokio::time::interval_at(first, interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                if let Err(error) = self.sweep(&mut resume).await {
                    tracing::warn!(%error, "completer sweep failed");
                }
            }
        })
    }
}
