//! Duplicates waiting for one in-flight key share one wait per engine (per process): one task
//! reads the key's record per tick, however many wait, and an owner of this engine that
//! finishes wakes its waiters at once with its outcome, without a read. Their number is
//! bounded per key; beyond the bound a duplicate is answered "in flight" at once.
//!
//! A store-side wake-up (Redis pub/sub, PostgreSQL `NOTIFY`) feeds the same flights through
//! [`Waits::wake`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{Notify, watch};

use super::{Idempotency, NamespaceRef};
use crate::metrics::StoreOp;
use crate::{Claim, Fingerprint, Outcome, RecordState, StorageKey, Store, StoreError};

/// How many duplicates of one in-flight key may wait in one engine by default
/// ([`Config::max_waiters_per_key`](crate::Config::max_waiters_per_key)); more are answered
/// "in flight" at once.
pub const DEFAULT_MAX_WAITERS_PER_KEY: usize = 128;

/// The longest pause, by default, between two reads of an in-flight key's record while
/// duplicates wait for it ([`Config::in_flight_poll`](crate::Config::in_flight_poll)).
pub const DEFAULT_IN_FLIGHT_POLL: Duration = Duration::from_millis(250);

/// How an in-flight key's wait ended.
#[derive(Clone, Debug)]
enum Landing {
    /// Still in flight.
    Pending,
    /// Completed with this outcome, claimed with this fingerprint.
    Completed(Outcome, Fingerprint),
    /// Released, or its lease ended: claim it again.
    Open,
    /// The store failed while the wait read it.
    Failed(Arc<StoreError>),
}

/// The duplicates of one key waiting in this engine.
struct Flight {
    /// Tells this flight from a later one of the same key.
    id: u64,
    /// The fingerprint of the claim in flight (duplicates with another one claim themselves,
    /// and are told of the mismatch by the store).
    fingerprint: Fingerprint,
    /// When to retry, as the in-flight answer said.
    retry_after: Duration,
    waiters: usize,
    landing: watch::Sender<Landing>,
    /// Asks the flight's reads to read now (an owner of this engine finished).
    wake: Arc<Notify>,
}

/// The flights of one engine.
#[derive(Default)]
pub(crate) struct Waits {
    flights: Mutex<HashMap<StorageKey, Flight>>,
    next_id: AtomicU64,
    /// How many flights there are: an owner that finishes looks for waiters only when some
    /// key has any (one atomic load otherwise).
    active: AtomicUsize,
}

impl std::fmt::Debug for Waits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waits")
            .field("active", &self.active.load(Ordering::Relaxed))
            .finish()
    }
}

/// What a duplicate that found its key in flight does next.
enum Join {
    /// Wait for the flight's landing, then retry after this long if it did not land.
    Wait(watch::Receiver<Landing>, Waiter, Duration),
    /// The key has too many waiters: answer "in flight" now, retry after this long.
    Full(Duration),
    /// A flight of another fingerprint: claim, the store answers.
    Claim,
}

/// What the reads of a new flight need: its id, its landing (to see it end) and its wake-up.
struct FlightReads {
    id: u64,
    landing: watch::Receiver<Landing>,
    wake: Arc<Notify>,
}

/// One duplicate's place in a flight; leaving it (dropped) frees the place, and the last one
/// to leave ends the flight (and its reads).
struct Waiter {
    waits: Arc<Waits>,
    key: StorageKey,
    flight: u64,
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut flights = self.waits.lock();
        if let Some(flight) = flights.get_mut(&self.key)
            && flight.id == self.flight
        {
            flight.waiters -= 1;
            if flight.waiters == 0
                && let Some(flight) = flights.remove(&self.key)
            {
                self.waits.active.fetch_sub(1, Ordering::Relaxed);
                // Its reads see the flight gone (its landing dropped) at once, and stop.
                let wake = Arc::clone(&flight.wake);
                drop(flight);
                wake.notify_one();
            }
        }
    }
}

impl Waits {
    fn lock(&self) -> MutexGuard<'_, HashMap<StorageKey, Flight>> {
        self.flights.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Joins the flight of `key`, if there is one.
    fn join_existing(
        self: &Arc<Self>,
        key: StorageKey,
        fingerprint: &Fingerprint,
        max_waiters: usize,
    ) -> Option<Join> {
        if self.active.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut flights = self.lock();
        let flight = flights.get_mut(&key)?;
        Some(self.enter(flight, key, fingerprint, max_waiters))
    }

    /// Joins the flight of `key`, or starts it and returns what its reads need.
    fn join_or_start(
        self: &Arc<Self>,
        key: StorageKey,
        fingerprint: &Fingerprint,
        retry_after: Duration,
        max_waiters: usize,
    ) -> (Join, Option<FlightReads>) {
        let mut flights = self.lock();
        if let Some(flight) = flights.get_mut(&key) {
            return (self.enter(flight, key, fingerprint, max_waiters), None);
        }
        let (landing, receiver) = watch::channel(Landing::Pending);
        let wake = Arc::new(Notify::new());
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        flights.insert(
            key,
            Flight {
                id,
                fingerprint: *fingerprint,
                retry_after,
                waiters: 1,
                landing,
                wake: Arc::clone(&wake),
            },
        );
        self.active.fetch_add(1, Ordering::Relaxed);
        let waiter = Waiter {
            waits: Arc::clone(self),
            key,
            flight: id,
        };
        let reads = FlightReads {
            id,
            landing: receiver.clone(),
            wake,
        };
        (Join::Wait(receiver, waiter, retry_after), Some(reads))
    }

    fn enter(
        self: &Arc<Self>,
        flight: &mut Flight,
        key: StorageKey,
        fingerprint: &Fingerprint,
        max_waiters: usize,
    ) -> Join {
        if flight.fingerprint != *fingerprint {
            return Join::Claim;
        }
        if flight.waiters >= max_waiters {
            return Join::Full(flight.retry_after);
        }
        flight.waiters += 1;
        let receiver = flight.landing.subscribe();
        let waiter = Waiter {
            waits: Arc::clone(self),
            key,
            flight: flight.id,
        };
        Join::Wait(receiver, waiter, flight.retry_after)
    }

    /// Asks the flight of `key`, if any, to read the record now: an owner of this engine (or
    /// a store-side notification) says the key was completed or released.
    pub(crate) fn wake(&self, key: &StorageKey) {
        if self.active.load(Ordering::Relaxed) == 0 {
            return;
        }
        if let Some(flight) = self.lock().get(key) {
            flight.wake.notify_one();
        }
    }

    /// Ends the flight `id` of `key`: its waiters get `landing`, and later duplicates claim
    /// afresh.
    fn land(&self, key: &StorageKey, id: u64, landing: Landing) {
        let mut flights = self.lock();
        if flights.get(key).is_some_and(|flight| flight.id == id)
            && let Some(flight) = flights.remove(key)
        {
            self.active.fetch_sub(1, Ordering::Relaxed);
            flight.landing.send_replace(landing);
        }
    }

    /// How many duplicates wait, over every key.
    fn waiting(&self) -> usize {
        self.lock().values().map(|flight| flight.waiters).sum()
    }
}

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
    ) -> Result<super::Decision<S>, StoreError> {
        let waits = &self.inner.waits;
        let max_waiters = self.inner.config.max_waiters_per_key.max(1);
        // Set at the first wait: most claims are answered at once, without a clock.
        let mut deadline = None;
        let mut joined = waits.join_existing(key, fingerprint, max_waiters);
        loop {
            let join = match joined.take() {
                Some(join) => join,
                None => match self.claim_once(namespace, key, fingerprint).await? {
                    super::Decision::InFlight { retry_after } => {
                        let (join, reads) =
                            waits.join_or_start(key, fingerprint, retry_after, max_waiters);
                        if let Some(reads) = reads {
                            self.spawn_flight_reads(namespace, key, reads);
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

    /// Reads the record of `key` once per tick (backing off up to
    /// [`Config::in_flight_poll`](crate::Config::in_flight_poll)), or at once when woken, while
    /// its flight has waiters; lands the flight when the record is completed, gone or
    /// abandoned, or the store fails.
    fn spawn_flight_reads(&self, namespace: NamespaceRef<'_>, key: StorageKey, reads: FlightReads) {
        let FlightReads {
            id,
            landing: flight,
            wake,
        } = reads;
        let engine = self.clone();
        let namespace = namespace.to_owned();
        engine.tracker().clone().spawn(async move {
            let poll = engine.inner.config.in_flight_poll;
            let mut pause = (poll / 32).max(Duration::from_millis(1));
            loop {
                let _ = tokio::time::timeout(pause, wake.notified()).await;
                // Every waiter left (the flight is gone), or it landed otherwise.
                if !matches!(flight.has_changed(), Ok(false)) {
                    return;
                }
                let read = {
                    let call = std::pin::pin!(engine.inner.store.get(&key));
                    engine.timed(StoreOp::Get, namespace.by_ref(), call).await
                };
                let landing = match read {
                    Ok(Some(record)) => match (record.state, record.outcome) {
                        (RecordState::Completed, Some(outcome)) => {
                            Landing::Completed(outcome, record.fingerprint)
                        }
                        (RecordState::InProgress, _) if record.expires_at > SystemTime::now() => {
                            Landing::Pending
                        }
                        _ => Landing::Open,
                    },
                    Ok(None) => Landing::Open,
                    Err(error) => Landing::Failed(Arc::new(error)),
                };
                if !matches!(landing, Landing::Pending) {
                    engine.inner.waits.land(&key, id, landing);
                    return;
                }
                pause = (pause * 2).min(poll);
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
