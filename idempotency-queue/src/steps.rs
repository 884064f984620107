//! Consumers whose handler has several steps (feature `steps`): each message is a run with
//! steps (`idempotency_steps`), its checkpoints on the SQL record, so that a redelivery after a
//! crash or a failed step resumes after the last completed step.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use idempotency_core::{Mechanism, Scope};
use idempotency_sql::StepStore;
use idempotency_steps::{CallError, Run, Runner, Start, StepError};

use crate::{Handled, Handler, Job};

/// The steps of one message: given the run and the job, what the message produced, as JSON
/// (stored as the key's outcome; its bytes are the consumer's verdict output).
pub type StepsFn<S> = Box<
    dyn for<'r> Fn(
            &'r mut Run<S>,
            Job,
        ) -> Pin<
            Box<dyn Future<Output = Result<serde_json::Value, StepError>> + Send + 'r>,
        > + Send
        + Sync,
>;

/// A handler that runs each message as a run with steps on a SQL store: it guards itself (its
/// record decides, as `two_tier::SqlTruth`'s does), so build the consumer with any fast tier,
/// or none.
///
/// | delivery | what runs |
/// |---|---|
/// | first | every step, each checkpointed |
/// | redelivery after a crash or a failed step (`StepError::Retry`: the message is requeued) | the steps after the last checkpoint |
/// | after completion | nothing: the stored output (`Handled::Output`) |
/// | while another consumer runs the key | nothing: in flight, requeued |
/// | a step ended the run (`StepError::End`) | the compensations, then its answer as the output (acked) |
pub struct StepsHandler<S: StepStore> {
    runner: Runner<S>,
    scope: Scope,
    steps: StepsFn<S>,
}

impl<S: StepStore> StepsHandler<S> {
    /// Runs `steps` for each message of `scope` on `runner`'s store.
    pub fn new(runner: Runner<S>, scope: Scope, steps: StepsFn<S>) -> Self {
        Self {
            runner,
            scope,
            steps,
        }
    }
}

impl<S: StepStore + Sync + 'static> Handler for StepsHandler<S> {
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
        let ran = self
            .runner
            .run_once(start, job, async |run: &mut Run<S>, job: Job| {
                steps(run, job).await
            })
            .await;
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
        Some(self.runner.ttl())
    }
}
