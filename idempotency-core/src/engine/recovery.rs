//! After a store call failed at the wire (a timeout, a reset connection), the caller has its
//! answer, and this goes on in the background ([`crate::background`]), bounded:
//!
//! - a claim whose answer never came is undone by its claim id once the store answers again, so
//!   the client's retry runs at once rather than meeting a lease nobody owns;
//! - a complete or a release that failed is retried, fenced by the lease's token, with backoff,
//!   the lease renewed meanwhile, until it lands, the lease is lost, or the lease's end is near;
//!   only then is it given up, and reported.

use std::time::{Duration, Instant};

use super::handle::Idempotency;
use crate::Namespace;
use crate::metrics::StoreOp;
use crate::{
    ClaimId, CompleteRequest, Lease, Outcome, RecordState, StorageKey, Store, StoreError,
    TouchRequest,
};

/// The first pause between attempts; it doubles up to [`LONGEST_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(25);
/// The longest pause: once the store answers again, an unanswered claim is undone within it.
const LONGEST_PAUSE: Duration = Duration::from_millis(250);

/// The pauses between attempts.
struct Backoff(Duration);

impl Backoff {
    fn new() -> Self {
        Self(FIRST_PAUSE)
    }

    async fn pause(&mut self) {
        tokio::time::sleep(self.0).await;
        self.0 = (self.0 * 2).min(LONGEST_PAUSE);
    }
}

/// How often an undo that found nothing looks again, while a claim may still be on its way.
const UNDO_RECHECK: Duration = Duration::from_millis(200);

/// Undoes, in the background, the claim `claim_id` of `key` whose answer never came. Once the
/// store answers again, an undo that found nothing looks again every [`UNDO_RECHECK`] for a
/// store timeout, for a claim still on its way (held in a link that came back, queued behind a
/// lock): a late claim blocks its key for at most that long. Gives up once the lease it would
/// have had ended: the record is abandoned then, and the next claim takes it over.
pub(super) fn undo_unanswered<S: Store>(
    engine: Idempotency<S>,
    namespace: Namespace,
    key: StorageKey,
    claim_id: ClaimId,
) {
    let until = Instant::now() + engine.config().lease;
    engine.tracker().clone().spawn(async move {
        let mut backoff = Backoff::new();
        let mut answering_since = None;
        loop {
            let call = std::pin::pin!(engine.store().undo_claim(&key, claim_id));
            match engine.timed(StoreOp::Undo, namespace.by_ref(), call).await {
                Ok(true) => {
                    tracing::info!(namespace = %namespace, key = %key, "a claim whose answer never came was undone");
                    return;
                }
                Ok(false) => {
                    let since = *answering_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= engine.config().store_timeout {
                        return;
                    }
                    tokio::time::sleep(UNDO_RECHECK).await;
                }
                Err(error) if error.is_transient() && Instant::now() < until => {
                    backoff.pause().await;
                }
                Err(error) => {
                    tracing::warn!(namespace = %namespace, key = %key, %error, "an unanswered claim could not be undone; it ends with its lease");
                    return;
                }
            }
        }
    });
}

/// The step a failed finish retries.
pub(super) enum Finish {
    Complete(Outcome),
    Release,
}

/// Carries out `finish` of `key`'s lease in the background: at once if `failed_before` is false
/// (an execution dropped unfinished), after a pause otherwise; again with backoff while the store
/// fails, renewing the lease meanwhile, until it lands, the lease is lost, or the lease's end is
/// near. A complete that meets a lost lease checks whether an earlier, unanswered attempt landed.
pub(super) fn retry_finish<S: Store>(
    engine: Idempotency<S>,
    namespace: Namespace,
    key: StorageKey,
    lease: Lease,
    finish: Finish,
    failed_before: bool,
) {
    let length = engine.config().lease;
    // The lease was renewed at least every third of it while the work ran: at least two
    // thirds of it are left.
    let mut ends = Instant::now() + length * 2 / 3;
    engine.tracker().clone().spawn(async move {
        let mut backoff = Backoff::new();
        let mut attempts = u32::from(failed_before);
        loop {
            if attempts > 0 {
                backoff.pause().await;
            }
            attempts += 1;
            if attempts > 1 && Instant::now() + length / 3 > ends {
                let call = std::pin::pin!(engine.store().touch(TouchRequest { key: &key, token: lease.token, lease: length }));
                match engine.timed(StoreOp::Touch, namespace.by_ref(), call).await {
                    Ok(()) => ends = Instant::now() + length,
                    Err(StoreError::LeaseLost) => break,
                    Err(_) if Instant::now() + length / 10 > ends => {
                        return gave_up(&namespace, &key, &finish);
                    }
                    Err(_) => continue,
                }
            }
            let done = match &finish {
                Finish::Complete(outcome) => {
                    let ttl = engine.config().ttl;
                    let call =
                        std::pin::pin!(engine.store().complete(CompleteRequest { key: &key, token: lease.token, outcome, ttl }));
                    engine
                        .timed(StoreOp::Complete, namespace.by_ref(), call)
                        .await
                }
                Finish::Release => {
                    let call = std::pin::pin!(engine.store().release(&key, lease.token));
                    engine
                        .timed(StoreOp::Release, namespace.by_ref(), call)
                        .await
                }
            };
            match done {
                Ok(()) if attempts > 1 => {
                    tracing::info!(namespace = %namespace, key = %key, attempts, step = finish.name(), "stored on a later attempt");
                    return;
                }
                Ok(()) => return,
                Err(StoreError::LeaseLost) => break,
                Err(error) if error.is_transient() => {}
                Err(_) => return gave_up(&namespace, &key, &finish),
            }
        }
        // The lease is no longer this owner's: an earlier attempt may have landed unanswered
        // (a released key is gone, or claimed anew: either way no longer held).
        if let Finish::Complete(_) = finish {
            let call = std::pin::pin!(engine.store().get(&key));
            let landed = matches!(
                engine.timed(StoreOp::Complete, namespace.by_ref(), call).await,
                Ok(Some(record)) if record.token == lease.token && record.state == RecordState::Completed
            );
            if !landed {
                gave_up(&namespace, &key, &finish);
            }
        }
    });
}

impl Finish {
    fn name(&self) -> &'static str {
        match self {
            Self::Complete(_) => "complete",
            Self::Release => "release",
        }
    }
}

fn gave_up(namespace: &Namespace, key: &StorageKey, finish: &Finish) {
    match finish {
        Finish::Complete(_) => tracing::error!(
            namespace = %namespace,
            key = %key,
            "the outcome could not be stored before the lease's end: a retry after it may run the work again"
        ),
        Finish::Release => tracing::warn!(
            namespace = %namespace,
            key = %key,
            "the key could not be released: a retry waits for the lease's end"
        ),
    }
}
