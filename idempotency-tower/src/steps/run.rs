//! The path of a guarded request through a steps layer: read, start or resume its run, run the
//! handler with it, then store the answer (or leave the run resumable).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use idempotency_core::{Error, Fingerprint, InFlightPolicy, StorageKey, telemetry};
use idempotency_steps::{Found, OwnedRun, RunStore, Start, StepRunner};
use tower_service::Service;

use super::handle::{Slot, StepsHandle};
use super::input::{Input, KeepInput, Resume};
use super::layer::Shared;
use crate::answer::{in_flight, mismatch, refuse, replay_or_refuse, unavailable};
use crate::body::ResponseBody;
use crate::collect::collect_request;
use crate::detach::Detachable;
use crate::flights::{Flight, after, within};
use crate::guarded::{Answered, Exchange, Guarded};
use crate::refusal::{Refusal, RefusalKind};
use crate::request::{Payload, Read, collected, inspect, pass_through};
use crate::stored::{Ending, ending_of, handle, respond};

/// Decides and answers one guarded request.
pub(crate) async fn run<X, S>(
    shared: Arc<Shared<S>>,
    keep: Option<KeepInput>,
    request: Guarded<X>,
) -> Answered<X>
where
    X: Exchange,
    S: RunStore,
{
    let Guarded(inner, mut parts, body, header_key) = request;
    let settings = &shared.settings;
    if let Some(refusal) = settings.overloaded() {
        return Ok(refuse(settings, refusal));
    }
    let body = collect_request(body, settings.max_body_bytes, settings.body_read_timeout).await;
    let held: Payload<X::Body> = match collected(settings, body) {
        Ok(held) => held,
        Err(refusal) => return Ok(refuse(settings, refusal)),
    };
    // The completer's resume names its run; any other request is read as every layer reads it.
    let (key, fingerprint, principal) = match parts.extensions.get::<Resume>() {
        Some(resume) => (resume.key, resume.fingerprint, resume.principal.clone()),
        None => match inspect(settings, &parts, &held, header_key) {
            Read::Guard(key, fingerprint) => (key, fingerprint, settings.principal_of(&parts)),
            Read::PassThrough => return pass_through(inner, parts, held).await,
            Read::Refuse(refusal) => return Ok(refuse(settings, refusal)),
        },
    };
    let input = match &held {
        Payload::Buffered(data, _) => {
            let kept = keep
                .as_ref()
                .map_or_else(|| data.clone(), |keep| keep(data));
            Input::encode(&parts, &kept, principal)
        }
        Payload::Streaming(_) => Bytes::new(),
    };
    let policy = settings.in_flight.until(settings.deadline(&parts));
    let started = Instant::now();
    // Duplicates in this process wait here, in memory; across processes, in the runner's start
    // (on the owner's hold in SQL, for the owner's answer or lease end on a core store).
    let Some(flight) = shared.flights.enter(key, policy).await else {
        return Ok(refuse(settings, in_flight(Duration::from_secs(1))));
    };
    let policy = after(policy, started.elapsed());
    let run = match start(&shared, &key, &fingerprint, input, policy).await {
        Ok(Found::Run(run)) => {
            let decision = if run.resumed() { "resume" } else { "execute" };
            telemetry::record_decision(decision, &key, None);
            run
        }
        Ok(Found::Replay(outcome)) => {
            telemetry::record_decision("replay", &key, None);
            return Ok(replay_or_refuse(settings, &outcome));
        }
        Ok(Found::InFlight(retry_after)) => {
            telemetry::record_decision("in_flight", &key, None);
            return Ok(refuse(settings, in_flight(retry_after)));
        }
        Ok(Found::Mismatch) => {
            telemetry::record_decision("mismatch", &key, None);
            let namespace = settings.scope.namespace();
            let store = shared.runner.store();
            crate::answer::mark_conflict(store, shared.store_timeout, namespace, &key).await;
            return Ok(refuse(settings, mismatch()));
        }
        Err(error) => {
            telemetry::record_key(&key);
            telemetry::record_error(&error);
            tracing::warn!(%error, "a run could not be started");
            return Ok(refuse(settings, unavailable(settings)));
        }
    };
    let slot = Slot::new(run);
    parts.extensions.insert(StepsHandle(Arc::clone(&slot)));
    let mut inner = inner;
    let handler = Box::pin(inner.call(Request::from_parts(parts, held.into_body())));
    // A client that goes away does not abandon the run: it goes on to its answer.
    let detached = Arc::clone(&shared.settings.detached);
    Detachable::new(finish(shared, slot, handler, flight), detached).await
}

/// Starts or resumes the run of `key`, waiting while a live owner runs it as `policy` allows.
async fn start<S: RunStore>(
    shared: &Shared<S>,
    key: &StorageKey,
    fingerprint: &Fingerprint,
    input: Bytes,
    policy: InFlightPolicy,
) -> Result<Found<S::Run>, Error> {
    let until = Instant::now() + policy.max_wait();
    let mut pause = Duration::from_millis(5);
    let namespace = shared.settings.scope.namespace();
    loop {
        // The database wakes a waiter when the owner gives its hold back (PostgreSQL, MySQL), a
        // core store when the owner answers (a leased run's start also reads again when the
        // owner's lease ends); SQLite, whose holds are in the process, is polled.
        let wait = until.saturating_duration_since(Instant::now());
        let request = Start::new(key, namespace, fingerprint, input.clone());
        let starting = shared.runner.start_waiting(request, wait);
        let started = within(shared.store_timeout + wait, starting).await?;
        let now = Instant::now();
        match started {
            Found::InFlight(_) if now < until => {
                tokio::time::sleep(pause.min(until - now)).await;
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            other => return Ok(other),
        }
    }
}

/// Runs the handler to its answer, then stores it (after the compensations, when a step ended
/// the run) or leaves the run resumable.
async fn finish<S, F, ResB, E>(
    shared: Arc<Shared<S>>,
    slot: Arc<Slot<S>>,
    handler: Pin<Box<F>>,
    // Held until the answer is stored or the run paused: then the next duplicate goes on.
    _flight: Flight,
) -> Result<Response<ResponseBody<ResB>>, E>
where
    S: RunStore,
    F: Future<Output = Result<Response<ResB>, E>>,
    ResB: Body<Data = Bytes> + Unpin,
{
    let settings = &shared.settings;
    let handled = handle(handler, settings.max_stored_bytes).await;
    let ending = ending_of(settings, &handled);
    let Some(run) = slot.reclaim() else {
        let detail = "the handler kept the request's run past its answer; nothing was stored";
        tracing::error!("{detail}");
        let refusal = Refusal::new(RefusalKind::TransactionUnavailable, detail);
        return Ok(refuse(settings, refusal));
    };
    match ending {
        Ending::Complete {
            outcome,
            content_length,
        } => match complete(&shared, run, &outcome).await {
            Ok(()) => {
                telemetry::record_current(telemetry::FINISH, "completed");
                respond(handled, content_length)
            }
            Err(error) => {
                tracing::warn!(%error, "a run's answer could not be stored; the run stays resumable");
                Ok(refuse(settings, unavailable(settings)))
            }
        },
        Ending::Release => {
            run.pause().await;
            telemetry::record_current(telemetry::FINISH, "paused");
            respond(handled, None)
        }
    }
}

/// Stores the run's answer (compensating first when a step ended it), within the store's
/// timeout for each statement's worth of work.
async fn complete<S: RunStore>(
    shared: &Shared<S>,
    run: S::Run,
    outcome: &idempotency_core::Outcome,
) -> Result<(), idempotency_steps::StepError> {
    let bound = shared.store_timeout * 4;
    tokio::time::timeout(bound, run.complete(outcome))
        .await
        .unwrap_or(Err(idempotency_steps::StepError::Store(Error::Timeout(
            bound,
        ))))
}
