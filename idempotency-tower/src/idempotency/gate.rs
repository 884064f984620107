//! The decision for a guarded request: read what is needed, claim, then run, replay or refuse.

use http::Request;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use idempotency_core::background::Tracker;
use idempotency_core::{Decision, Fingerprint, InFlightPolicy, StorageKey, Store, StoreError};

use super::layer::IdempotencyLayer;
use super::{conflict, execute};
use crate::answer::{in_flight, mismatch, refuse, replay, unavailable};
use crate::callback::ConflictAnswer;
use crate::collect::collect_request;
use crate::guarded::{Answered, Exchange, Guarded};
use crate::request::{Payload, Read, collected, inspect, pass_through, previous_fingerprint};

type BoxedClaim<S> = Pin<Box<dyn Future<Output = Result<Decision<S>, StoreError>> + Send>>;

/// Claims the key for a request: one store call (or, in wait mode, a bounded poll).
///
/// A conflict (another fingerprint) where the layer answers it with the stored response
/// ([`ConflictAnswer::ReplayStored`]), or reads the previous fingerprint too (`previous`), is
/// resolved here too, in the same boxed future.
///
/// If the request is dropped meanwhile (the client went away), the claim still runs to its end
/// in the background, and a key it took is released at once (by dropping the execution) rather
/// than left in flight, refusing retries, until its lease ends.
fn claim<S: Store>(
    layer: &IdempotencyLayer<S>,
    storage_key: StorageKey,
    fingerprint: Fingerprint,
    previous: Option<Fingerprint>,
    in_flight: InFlightPolicy,
) -> ClaimGuard<S> {
    let replay_conflicts = layer.settings().on_conflict == ConflictAnswer::ReplayStored;
    let resolve_conflicts = replay_conflicts || previous.is_some();
    let shared = Arc::clone(&layer.shared);
    let tracker = shared.engine.tracker().clone();
    ClaimGuard {
        claim: Some(Box::pin(async move {
            let scope = &shared.settings.scope;
            match shared
                .engine
                .claim(scope, storage_key, &fingerprint, in_flight)
                .await
            {
                Ok(Decision::Mismatch) if resolve_conflicts => {
                    conflict::previous_or_conflict(&shared, storage_key, previous, replay_conflicts)
                        .await
                }
                decision => decision,
            }
        })),
        tracker,
    }
}

/// A claim that is finished in the background if dropped unfinished.
struct ClaimGuard<S: Store> {
    /// The store's answer to come (`None` once it came).
    claim: Option<BoxedClaim<S>>,
    /// What finishes the claim if the guard is dropped first.
    tracker: Tracker,
}

impl<S: Store> Future for ClaimGuard<S> {
    type Output = Result<Decision<S>, StoreError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(claim) = self.claim.as_mut() else {
            panic!("ClaimGuard polled after completion");
        };
        let decision = ready!(claim.as_mut().poll(cx));
        self.claim = None;
        Poll::Ready(decision)
    }
}

impl<S: Store> Drop for ClaimGuard<S> {
    fn drop(&mut self) {
        if let Some(claim) = self.claim.take() {
            tracing::debug!(
                "request dropped during its claim; finishing the claim in the background"
            );
            self.tracker.spawn(async move {
                // A key won here has no handler to run: give it back at once, so that the
                // client's retry runs rather than meeting a lease nobody renews.
                if let Ok(Decision::Execute(execution)) = claim.await {
                    let released = execution.release().await;
                    tracing::debug!(
                        ?released,
                        "the request left before its handler started; key released"
                    );
                }
            });
        }
    }
}

/// Decides and answers one guarded request.
#[allow(clippy::manual_async_fn)] // an `async fn` would keep its arguments twice
pub(crate) fn run<X, S>(
    layer: IdempotencyLayer<S>,
    request: Guarded<X>,
) -> impl Future<Output = Answered<X>> + Send + 'static
where
    X: Exchange,
    S: Store,
{
    let Guarded(inner, parts, body, header_key) = request;
    async move {
        let settings = layer.settings();
        if let Some(refusal) = settings.overloaded() {
            return Ok(refuse(settings, refusal));
        }
        let held = if settings.needs_body() {
            let body =
                collect_request(body, settings.max_body_bytes, settings.body_read_timeout).await;
            match collected(settings, body) {
                Ok(held) => held,
                Err(refusal) => return Ok(refuse(settings, refusal)),
            }
        } else {
            Payload::Streaming(body)
        };
        let (key, fingerprint) = match inspect(settings, &parts, &held, header_key) {
            Read::Guard(key, fingerprint) => (key, fingerprint),
            Read::PassThrough => return pass_through(inner, parts, held).await,
            Read::Refuse(refusal) => return Ok(refuse(settings, refusal)),
        };
        // A wait never outlives the caller's deadline (read only where there is a wait).
        let in_flight_policy = match settings.in_flight {
            InFlightPolicy::Reject => InFlightPolicy::Reject,
            policy => policy.until(settings.deadline(&parts)),
        };
        let previous = previous_fingerprint(settings, &parts, &held);
        let decision = claim(&layer, key, fingerprint, previous, in_flight_policy).await;
        let error = match decision {
            Ok(Decision::Execute(execution)) => {
                let request = Request::from_parts(parts, held.into_body());
                return execute::run::<X, S>(&layer, execution, inner, request).await;
            }
            Ok(Decision::Replay(outcome)) => match replay(&outcome) {
                Ok(response) => return Ok(response),
                Err(error) => {
                    // The work was done: never run it again, fail-open or not.
                    tracing::error!(%error, "stored response could not be decoded; refused");
                    return Ok(refuse(settings, unavailable(settings)));
                }
            },
            Ok(Decision::InFlight { retry_after }) => {
                return Ok(refuse(settings, in_flight(retry_after)));
            }
            Ok(Decision::Mismatch) => {
                // Refused, and marked all the same: reconciliation lists the record.
                conflict::mark(&layer.shared, key).await;
                return Ok(refuse(settings, mismatch()));
            }
            Err(error) => error,
        };

        if settings.fail_open {
            tracing::warn!(%error, "idempotency store failed; failing open, the request runs unguarded");
            settings.counters.failed_open();
            return pass_through(inner, parts, held).await;
        }
        Ok(refuse(settings, unavailable(settings)))
    }
}
