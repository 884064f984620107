//! The path of a guarded request through a transactional layer: read, claim in a new
//! transaction, run the handler in it, then store the response and commit (or roll back).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use http_body::Body;
use idempotency_core::{
    Error, Fingerprint, InFlightPolicy, Mechanism, Outcome, RecordState, StorageKey, telemetry,
};
use idempotency_sql::{TxClaim, TxClaimRequest, TxLease, TxStore};
use tower_service::Service;

use super::layer::Shared;
use super::tx::{Slot, TxHandle};
use crate::answer::{in_flight, mismatch, refuse, replay_or_refuse, unavailable};
use crate::body::ResponseBody;
use crate::callback::ConflictAnswer;
use crate::collect::collect_request;
use crate::detach::Detachable;
use crate::flights::{Flight, after, within};
use crate::guarded::{Answered, Exchange, Guarded};
use crate::refusal::{Refusal, RefusalKind};
use crate::request::{Payload, Read, collected, inspect, pass_through, previous_fingerprint};
use crate::stored::{Ending, ending_of, handle, respond};

/// The request's transaction.
type Transaction<S> = sqlx::Transaction<'static, <S as TxStore>::Database>;

/// Decides and answers one guarded request.
pub(crate) async fn run<X, S>(shared: Arc<Shared<S>>, request: Guarded<X>) -> Answered<X>
where
    X: Exchange,
    S: TxStore,
{
    let Guarded(inner, parts, body, header_key) = request;
    let settings = &shared.settings;
    if let Some(refusal) = settings.overloaded() {
        return Ok(refuse(settings, refusal));
    }
    // Always read before the transaction opens, within the read timeout: a body streamed to
    // the handler would hold the transaction (and its connection) while a slow client sends it.
    let body = collect_request(body, settings.max_body_bytes, settings.body_read_timeout).await;
    let held: Payload<X::Body> = match collected(settings, body) {
        Ok(held) => held,
        Err(refusal) => return Ok(refuse(settings, refusal)),
    };
    let (key, fingerprint) = match inspect(settings, &parts, &held, header_key) {
        Read::Guard(key, fingerprint) => (key, fingerprint),
        Read::PassThrough => return pass_through(inner, parts, held).await,
        Read::Refuse(refusal) => return Ok(refuse(settings, refusal)),
    };
    // A duplicate of a key this layer saw completed: one read, no transaction, no turn.
    if shared.completed.knows(&key)
        && let Some(answer) = completed_answer(&shared, &key, &[Some(fingerprint), None]).await
    {
        return Ok(answer);
    }
    let started = Instant::now();
    let deadline = settings.deadline(&parts);
    let policy = settings.in_flight.until(deadline);
    // Duplicates in this process wait here, in memory, not on database connections.
    let Some(flight) = shared.flights.enter(key, policy).await else {
        return Ok(refuse(settings, in_flight(Duration::from_secs(1))));
    };
    // A duplicate whose first request completed while it waited lets the next one in at once.
    let flight = if shared.completed.knows(&key) {
        drop(flight);
        if let Some(answer) = completed_answer(&shared, &key, &[Some(fingerprint), None]).await {
            return Ok(answer);
        }
        None
    } else {
        Some(flight)
    };
    let policy = after(policy, started.elapsed());
    let (tx, lease) = match claim(&shared, &key, &fingerprint, policy, deadline).await {
        Ok(Claimed::Execute(tx, lease)) => {
            let held = lease.lease();
            let decision = if held.took_over {
                "takeover"
            } else {
                "execute"
            };
            telemetry::record_decision(decision, &key, Some(&held));
            (tx, lease)
        }
        Ok(Claimed::Replay(outcome)) => {
            telemetry::record_decision("replay", &key, None);
            shared.completed.remember(&key);
            return Ok(replay_or_refuse(settings, &outcome));
        }
        Ok(Claimed::InFlight(retry_after)) => {
            telemetry::record_decision("in_flight", &key, None);
            return Ok(refuse(settings, in_flight(retry_after)));
        }
        Ok(Claimed::Mismatch) => {
            let previous = previous_fingerprint(settings, &parts, &held);
            if settings.on_conflict != ConflictAnswer::ReplayStored && previous.is_none() {
                telemetry::record_decision("mismatch", &key, None);
                mark_conflict(&shared, &key).await;
                return Ok(refuse(settings, mismatch()));
            }
            // The committed record it conflicts with answers (or, gone meanwhile, the retry):
            // written under the previous fingerprint, it is this request's.
            let fingerprints = [Some(fingerprint), previous];
            return Ok(match completed_answer(&shared, &key, &fingerprints).await {
                Some(answer) => answer,
                None => refuse(settings, in_flight(Duration::from_secs(1))),
            });
        }
        Err(error) => {
            telemetry::record_key(&key);
            telemetry::record_error(&error);
            tracing::warn!(%error, "transactional claim failed");
            return Ok(refuse(settings, unavailable(settings)));
        }
    };
    tracing::debug!(
        attempt = lease.lease().attempt,
        "claimed in the request's transaction"
    );
    let slot = Slot::new(tx);
    let mut parts = parts;
    parts
        .extensions
        .insert(TxHandle::<S::Database>(Arc::clone(&slot)));
    let mut inner = inner;
    let handler = Box::pin(inner.call(Request::from_parts(parts, held.into_body())));
    // A client that goes away does not abandon the handler: it runs to its commit.
    let detached = Arc::clone(&shared.settings.detached);
    Detachable::new(finish(shared, slot, lease, handler, flight), detached).await
}

/// The answer to a duplicate of a completed key, read outside any transaction: its stored
/// response when the record holds one of `fingerprints` (the request's, and the one computed
/// before a change), or for another payload 422 or, with [`ConflictAnswer::ReplayStored`], the
/// stored response (logged and counted); another payload is marked on the record either way.
/// `None` when the record is no longer completed and live (purged, expired) or cannot be read:
/// the key then takes the claim's path.
async fn completed_answer<S: TxStore, B: Body>(
    shared: &Shared<S>,
    key: &StorageKey,
    fingerprints: &[Option<Fingerprint>; 2],
) -> Option<Response<ResponseBody<B>>> {
    let record = match within(shared.store_timeout, shared.store.get(key)).await {
        Ok(Some(record)) => record,
        Ok(None) => {
            shared.completed.forget(key);
            return None;
        }
        Err(_) => return None,
    };
    let live = record.state == RecordState::Completed && record.expires_at > SystemTime::now();
    let outcome = record.outcome.filter(|_| live)?;
    let settings = &shared.settings;
    Some(if fingerprints.contains(&Some(record.fingerprint)) {
        telemetry::record_decision("replay", key, None);
        replay_or_refuse(settings, &outcome)
    } else if settings.on_conflict == ConflictAnswer::ReplayStored {
        telemetry::record_decision("mismatch", key, None);
        crate::answer::report_conflict(settings, key);
        mark_conflict(shared, key).await;
        replay_or_refuse(settings, &outcome)
    } else {
        telemetry::record_decision("mismatch", key, None);
        mark_conflict(shared, key).await;
        refuse(settings, mismatch())
    })
}

/// Marks the record a request with another payload met (outside any transaction).
async fn mark_conflict<S: TxStore>(shared: &Shared<S>, key: &StorageKey) {
    let namespace = shared.settings.scope.namespace();
    crate::answer::mark_conflict(&shared.store, shared.store_timeout, namespace, key).await;
}

/// Begins the request's transaction and claims the key in it, waiting on another
/// transaction's uncommitted claim as `policy` allows, and never past `deadline`.
///
/// A claim that holds one of the layer's permits waits on the database (on the other
/// transaction's row); one without asks without waiting and, while the key is in flight, polls
/// with backoff from memory, holding no connection meanwhile: waiting duplicates never take all
/// the pool's connections.
async fn claim<S: TxStore>(
    shared: &Shared<S>,
    key: &StorageKey,
    fingerprint: &Fingerprint,
    policy: InFlightPolicy,
    deadline: Option<Instant>,
) -> Result<Claimed<S>, Error> {
    let timeout = shared.store_timeout;
    let waits_until = Instant::now() + policy.max_wait();
    let mut pause = Duration::from_millis(5);
    // Once the key was seen in flight, running out of time is that answer, not a failure.
    let mut seen_in_flight = None;
    loop {
        let permit = shared.claims.try_enter();
        let now = Instant::now();
        let asked = match (policy, &permit) {
            (InFlightPolicy::Wait { .. }, Some(_)) if now < waits_until => {
                InFlightPolicy::wait(waits_until - now)
            }
            _ => InFlightPolicy::Reject,
        };
        // Never past the caller's deadline, even for the pool or SQLite's write lock.
        let begin_bound = deadline.map_or(timeout, |deadline| {
            timeout.min(
                deadline
                    .saturating_duration_since(now)
                    .max(Duration::from_millis(1)),
            )
        });
        let attempt = async {
            let mut tx = within(begin_bound, shared.store.begin()).await?;
            let request = TxClaimRequest {
                lease: shared.lease,
                ttl: shared.ttl,
                in_flight: asked,
                // Requests are keyed alike by every derivation: no previous key.
                mechanism: Some(Mechanism::Request),
                ..shared
                    .store
                    .tx_request(shared.settings.scope.namespace(), key, fingerprint)
            };
            let claim = shared.store.claim_storage_key_in_tx(&mut tx, request);
            let claimed = within(timeout + asked.max_wait(), claim).await?;
            Ok::<_, Error>((tx, claimed))
        };
        let now = Instant::now();
        match attempt.await {
            Ok((tx, TxClaim::Execute(lease))) => return Ok(Claimed::Execute(tx, lease)),
            // Without a permit, or where the database's bound is coarser (MariaDB's whole
            // seconds), time is left: ask again shortly.
            Ok((_, TxClaim::InFlight { retry_after })) if now < waits_until => {
                seen_in_flight = Some(retry_after);
                drop(permit);
                tokio::time::sleep(pause.min(waits_until - now)).await;
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            // The transactions below wrote nothing: dropped, they roll back in the background.
            Ok((_, TxClaim::Replay(outcome))) => return Ok(Claimed::Replay(outcome)),
            Ok((_, TxClaim::InFlight { retry_after })) => {
                return Ok(Claimed::InFlight(retry_after));
            }
            Ok((_, TxClaim::Mismatch)) => return Ok(Claimed::Mismatch),
            Err(error) => return seen_in_flight.map(Claimed::InFlight).ok_or(error),
        }
    }
}

/// What a claim came to: the key in the request's transaction, or the answer to a duplicate.
enum Claimed<S: TxStore> {
    Execute(Transaction<S>, TxLease),
    Replay(Outcome),
    InFlight(Duration),
    Mismatch,
}

/// Runs the handler to its end, then stores its response and commits, or rolls back.
async fn finish<S, F, ResB, E>(
    shared: Arc<Shared<S>>,
    slot: Arc<Slot<S::Database>>,
    lease: TxLease,
    handler: Pin<Box<F>>,
    flight: Option<Flight>,
) -> Result<Response<ResponseBody<ResB>>, E>
where
    S: TxStore,
    F: Future<Output = Result<Response<ResB>, E>>,
    ResB: Body<Data = Bytes> + Unpin,
{
    let settings = &shared.settings;
    let handled = handle(handler, settings.max_stored_bytes).await;
    let ending = ending_of(settings, &handled);
    let (tx, without_record) = slot.reclaim();
    let Some(tx) = tx else {
        tracing::error!(
            "the handler kept the request's transaction past its answer; nothing was committed"
        );
        let refusal = Refusal::new(
            RefusalKind::TransactionUnavailable,
            "the handler kept the request's transaction past its answer; nothing was committed",
        );
        return Ok(refuse(settings, refusal));
    };
    let key = *lease.key();
    let stored = !without_record && matches!(ending, Ending::Complete { .. });
    let commits = stored || without_record;
    let committed = commit(&shared, tx, lease, ending, without_record).await;
    if stored && committed.is_ok() {
        shared.completed.remember(&key);
    }
    let hooks = slot.after_commit();
    if commits && committed.is_ok() {
        hooks.into_iter().for_each(|hook| hook());
    }
    // Duplicates waiting in this process go on: they will find the committed record.
    drop(flight);
    match committed {
        Ok(content_length) => respond(handled, content_length),
        Err(error) => {
            tracing::warn!(%error, "the request's transaction could not be committed");
            Ok(refuse(settings, unavailable(settings)))
        }
    }
}

/// Stores the outcome in the transaction and commits; or commits without a record, as the
/// handler asked; or rolls everything back. Returns the stored `Content-Length`, if one was
/// added to the response.
async fn commit<S: TxStore>(
    shared: &Shared<S>,
    mut tx: Transaction<S>,
    lease: TxLease,
    ending: Ending,
    without_record: bool,
) -> Result<Option<HeaderValue>, Error> {
    let timeout = shared.store_timeout;
    let store = &shared.store;
    if without_record {
        within(timeout, store.release_in_tx(&mut tx, lease)).await?;
        within(timeout, async {
            tx.commit().await.map_err(idempotency_sql::from_sqlx)
        })
        .await?;
        tracing::debug!("committed without a record, as the handler asked");
        return Ok(None);
    }
    match ending {
        Ending::Complete {
            outcome,
            content_length,
        } => {
            within(timeout, store.complete_in_tx(&mut tx, lease, &outcome)).await?;
            within(timeout, async {
                tx.commit().await.map_err(idempotency_sql::from_sqlx)
            })
            .await?;
            tracing::debug!(status = outcome.status, "response stored and committed");
            telemetry::record_current(telemetry::FINISH, "completed");
            Ok(content_length)
        }
        Ending::Release => {
            // Nothing of the request stays: its business writes go with its claim.
            let _ = within(timeout, async {
                tx.rollback().await.map_err(idempotency_sql::from_sqlx)
            })
            .await;
            telemetry::record_current(telemetry::FINISH, "released");
            Ok(None)
        }
    }
}
