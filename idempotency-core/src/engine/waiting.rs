//! Duplicates of an in-flight key waiting for its first owner: one flight of reads per key,
//! woken when the record lands.

use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant, SystemTime};

use super::Decision;
use super::handle::Idempotency;
use super::waits::{FlightReads, Join, Landing};
use crate::metrics::StoreOp;
use crate::namespace::NamespaceRef;
use crate::{Claim, Fingerprint, RecordState, StorageKey, Store, StoreError};

/// How long after the end of an owner's lease its waiters read the record: the lease is over
/// by then on the writer's clock and this one's (within the margin).
const LEASE_END_MARGIN: Duration = Duration::from_millis(5);

impl<S: Store> Idempotency<S> {
    /// Claims `key`, waiting up to `max_wait` while it is in flight: in one shared wait per key
    /// (see the module docs), then the landing's answer: its outcome (or a mismatch), or a new
    /// claim if it was released; still in flight at the end → the in-flight answer, without
    /// another store call.
    pub(super) async fn claim_waiting(
        &self,
        namespace: NamespaceRef<'_>,
        key: StorageKey,
        fingerprint: &Fingerprint,
        max_wait: Duration,
    ) -> Result<Decision<S>, StoreError> {
        let waits = &self.inner.waits;
        let max_waiters = self.inner.config.max_waiters_per_key.max(1);
        // Set at the first wait: most claims are answered at once, without a clock.
        let mut deadline = None;
        let mut joined = waits.join_existing(key, fingerprint, max_waiters);
        loop {
            let join = match joined.take() {
                Some(join) => join,
                None => match self.claim_once(namespace, key, fingerprint).await? {
                    Decision::InFlight { retry_after } => {
                        let (join, reads) =
                            waits.join_or_start(key, fingerprint, retry_after, max_waiters);
                        if let Some(reads) = reads {
                            self.spawn_flight_reads(namespace, key, reads, retry_after);
                        }
                        join
                    }
                    decision => return Ok(decision),
                },
            };
            let (mut landing, waiter, retry_after) = match join {
                Join::Wait(landing, waiter, retry_after) => (landing, waiter, retry_after),
                Join::Full(retry_after) => {
                    tracing::debug!(namespace = namespace.as_str(), key = %key, "too many duplicates wait for this key; answered in flight at once");
                    let claim = Claim::InProgress {
                        lease_remaining: retry_after,
                    };
                    return Ok(self.decide(namespace, key, claim));
                }
                Join::Claim => return self.claim_once(namespace, key, fingerprint).await,
            };
            let deadline = *deadline.get_or_insert_with(|| Instant::now() + max_wait);
            let landed = tokio::time::timeout_at(
                deadline.into(),
                landing.wait_for(|landing| !matches!(landing, Landing::Pending)),
            )
            .await
            .map(|landed| landed.map(|landed| landed.clone()));
            drop(waiter);
            match landed {
                Ok(Ok(Landing::Completed(outcome, claimed_with))) => {
                    let claim = if claimed_with == *fingerprint {
                        Claim::Completed(outcome)
                    } else {
                        Claim::Mismatch
                    };
                    return Ok(self.decide(namespace, key, claim));
                }
                Ok(Ok(Landing::Failed(error))) => return Err(copy_of(&error)),
                // Released, or its reads stopped: claim again (within the deadline).
                Ok(Ok(Landing::Open | Landing::Pending)) | Ok(Err(_)) => {}
                Err(_) => {
                    let claim = Claim::InProgress {
                        lease_remaining: retry_after,
                    };
                    return Ok(self.decide(namespace, key, claim));
                }
            }
        }
    }

    /// Reads the record of `key` while its flight has waiters, and lands the flight when the
    /// record is completed, gone or abandoned, or the store fails. Reads come at once when an
    /// owner of this engine finishes or the store's wake-ups ([`Store::wake_ups`], subscribed
    /// before the first read) tell of a landing, and at the end of the owner's lease; else once
    /// per tick: every [`Config::in_flight_poll`](crate::Config::in_flight_poll) while
    /// subscribed, and without wake-ups (or once they were lost) from 1/32 of it, doubling.
    fn spawn_flight_reads(
        &self,
        namespace: NamespaceRef<'_>,
        key: StorageKey,
        reads: FlightReads,
        lease_left: Duration,
    ) {
        let FlightReads {
            id,
            landing: flight,
            wake,
        } = reads;
        let engine = self.clone();
        let namespace = namespace.to_owned();
        engine.tracker().clone().spawn(async move {
            let poll = engine.inner.config.in_flight_poll;
            let first = (poll / 32).max(Duration::from_millis(1));
            let mut heard = engine.inner.store.wake_ups(&key).await;
            let mut pause = if heard.is_some() {
                Duration::ZERO
            } else {
                first.min(lease_left + LEASE_END_MARGIN)
            };
            loop {
                let lost = {
                    let mut own = std::pin::pin!(wake.notified());
                    let mut store = std::pin::pin!(async {
                        match heard.as_mut() {
                            Some(heard) => heard.changed().await.is_err(),
                            None => std::future::pending().await,
                        }
                    });
                    let woken = std::future::poll_fn(|cx| match own.as_mut().poll(cx) {
                        Poll::Ready(()) => Poll::Ready(false),
                        Poll::Pending => store.as_mut().poll(cx),
                    });
                    !pause.is_zero() && tokio::time::timeout(pause, woken).await == Ok(true)
                };
                if lost {
                    (heard, pause) = (None, first);
                }
                // Every waiter left (the flight is gone), or it landed otherwise.
                if !matches!(flight.has_changed(), Ok(false)) {
                    return;
                }
                let read = {
                    let call = std::pin::pin!(engine.inner.store.get(&key));
                    engine.timed(StoreOp::Get, namespace.by_ref(), call).await
                };
                let mut lease_left = None;
                let landing = match read {
                    Ok(Some(record)) => match (record.state, record.outcome) {
                        (RecordState::Completed, Some(outcome)) => {
                            Landing::Completed(outcome, record.fingerprint)
                        }
                        (RecordState::InProgress, _) => {
                            match record.expires_at.duration_since(SystemTime::now()) {
                                Ok(left) if !left.is_zero() => {
                                    lease_left = Some(left);
                                    Landing::Pending
                                }
                                _ => Landing::Open,
                            }
                        }
                        _ => Landing::Open,
                    },
                    Ok(None) => Landing::Open,
                    Err(error) => Landing::Failed(Arc::new(error)),
                };
                let Some(lease_left) = lease_left else {
                    engine.inner.waits.land(&key, id, landing);
                    return;
                };
                let tick = if heard.is_some() {
                    poll
                } else {
                    (pause * 2).min(poll)
                };
                // An owner that dies publishes nothing: its lease's end is read when it comes.
                pause = tick.min(lease_left + LEASE_END_MARGIN);
            }
        });
    }

    /// How many duplicates wait in this engine for in-flight keys, over every key (bounded by
    /// [`Config::max_waiters_per_key`](crate::Config::max_waiters_per_key) per key).
    pub fn in_flight_waiters(&self) -> usize {
        self.inner.waits.waiting()
    }
}

/// A store error as each waiter of a failed read gets it (errors are not `Clone`).
fn copy_of(error: &StoreError) -> StoreError {
    match error {
        StoreError::Unavailable(text) => StoreError::Unavailable(text.clone()),
        StoreError::Timeout(after) => StoreError::Timeout(*after),
        StoreError::CapacityExceeded(capacity) => StoreError::CapacityExceeded(*capacity),
        StoreError::Codec(text) => StoreError::Codec(text.clone()),
        other => StoreError::Backend(other.to_string().into()),
    }
}
