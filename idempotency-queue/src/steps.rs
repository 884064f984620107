//! Consumers whose handler has several steps (feature `steps`): each message is a run with
//! steps (`idempotency_steps`), its checkpoints on its record (SQL, or a core store such as
//! Redis under a lease), so that a redelivery after a crash or a failed step resumes after the
//! last completed step.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use idempotency_core::{Mechanism, Scope};
#[cfg(feature = "sql")]
use idempotency_sql::StepStore;
use idempotency_steps::leased::{self, Leased};
use idempotency_steps::{CallError, RunStore, Start, StepError, StepRunner};

use crate::{Handled, Handler, Job};

/// The steps of one message: given the run and the job, what the message produced, as JSON
/// (stored as the key's outcome; its bytes are the consumer's verdict output). The run is the
/// store's: [`idempotency_steps::Run`] for a SQL store, [`idempotency_steps::leased::Run`] for
/// [`Leased<S>`](idempotency_steps::leased::Leased).
pub type StepsFn<S> = Box<
    dyn for<'r> Fn(
            &'r mut <S as RunStore>::Run,
            Job,
        ) -> Pin<
            Box<dyn Future<Output = Result<serde_json::Value, StepError>> + Send + 'r>,
        > + Send
        + Sync,
>;

/// A handler that runs each message as a run with steps: on a SQL store
/// (`StepsHandler<PostgresStore>` with an [`idempotency_steps::Runner`]: local and foreign
/// steps), or on a core store under a lease (`StepsHandler<Leased<RedisStore>>` with an
/// [`idempotency_steps::leased::Runner`]: foreign steps, each run at least once with its
/// downstream key). It guards itself (its record decides, as `two_tier::SqlTruth`'s does), so
/// build the consumer with any fast tier, or none.
///
/// | delivery | what runs |
/// |---|---|
/// | first | every step, each checkpointed |
/// | redelivery after a crash or a failed step (`StepError::Retry`: the message is requeued) | the steps after the last checkpoint |
/// | after completion | nothing: the stored output (`Handled::Output`) |
/// | while another consumer runs the key | nothing: in flight, requeued |
/// | a step ended the run (`StepError::End`) | the compensations, then its answer as the output (acked) |
pub struct StepsHandler<S: RunStore> {
    runner: S::Runner,
    scope: Scope,
    steps: StepsFn<S>,
}

#[cfg(feature = "sql")]
impl<S: StepStore> StepsHandler<S> {
    /// Runs `steps` for each message of `scope` on `runner`'s SQL store.
    pub fn new(runner: idempotency_steps::Runner<S>, scope: Scope, steps: StepsFn<S>) -> Self {
        Self {
            runner,
            scope,
            steps,
        }
    }
}

impl<S> StepsHandler<Leased<S>>
where
    Leased<S>: RunStore<Runner = leased::Runner<S>>,
{
    /// Runs `steps` for each message of `scope` as a leased run on `runner`'s core store
    /// (Redis, Redis Cluster, Valkey, the memory store): give the runner a wait
    /// ([`leased::Runner::with_wait`]) so that a redelivery of a dead consumer's message takes
    /// its run over once the lease ends, rather than being requeued in flight until then.
    pub fn leased(runner: leased::Runner<S>, scope: Scope, steps: StepsFn<Leased<S>>) -> Self {
        Self {
            runner,
            scope,
            steps,
        }
    }
}

impl<S: RunStore> Handler for StepsHandler<S> {
    type Error = String;

    async fn handle(&self, job: Job) -> Result<Handled, String> {
        let key = self
            .scope
            .storage_key_for(Mechanism::Message, job.key.as_str());
        let fingerprint = job.fingerprint;
        let payload = job.message.payload().clone();
        let mut start = Start::new(&key, self.scope.namespace(), &fingerprint, payload);
        start.mechanism = Some(Mechanism::Message);
        let steps = &self.steps;
        let run_steps = async |run: &mut S::Run, job: Job| steps(run, job).await;
        let ran = idempotency_steps::run_once(&self.runner, start, job, run_steps).await;
        match ran {
            Ok(answer) => {
                let output = Bytes::from(answer.value.to_string());
                Ok(if answer.replayed {
                    Handled::AlreadyDone(output)
                } else {
                    Handled::Output(output)
                })
            }
            Err(CallError::Ended(answer)) => Ok(Handled::Output(Bytes::from(answer.to_string()))),
            Err(CallError::InFlight(retry_after)) => Ok(Handled::InFlight { retry_after }),
            Err(CallError::Mismatch) => Ok(Handled::Mismatch),
            Err(error @ (CallError::Retry(_) | CallError::Store(_))) => Err(error.to_string()),
        }
    }

    fn guards_itself(&self) -> bool {
        true
    }

    fn record_ttl(&self) -> Option<Duration> {
        Some(StepRunner::ttl(&self.runner))
    }
}
