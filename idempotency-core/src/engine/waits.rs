//! Duplicates waiting for one in-flight key share one wait per engine (per process): one task
//! reads the key's record per tick, however many wait, and an owner of this engine that
//! finishes wakes its waiters at once with its outcome, without a read. Their number is
//! bounded per key; beyond the bound a duplicate is answered "in flight" at once.
//!
//! Across processes, the store's wake-ups ([`Store::wake_ups`](crate::Store::wake_ups), one
//! subscription per flight) wake the flight's reads.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, watch};

use crate::{Fingerprint, Outcome, StorageKey, StoreError};

/// How an in-flight key's wait ended.
#[derive(Clone, Debug)]
pub(super) enum Landing {
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
pub(super) struct Flight {
    /// Tells this flight from a later one of the same key.
    pub(super) id: u64,
    /// The fingerprint of the claim in flight (duplicates with another one claim themselves,
    /// and are told of the mismatch by the store).
    pub(super) fingerprint: Fingerprint,
    /// When to retry, as the in-flight answer said.
    pub(super) retry_after: Duration,
    pub(super) waiters: usize,
    pub(super) landing: watch::Sender<Landing>,
    /// Asks the flight's reads to read now (an owner of this engine finished).
    pub(super) wake: Arc<Notify>,
}

/// The flights of one engine.
#[derive(Default)]
pub(crate) struct Waits {
    pub(super) flights: Mutex<HashMap<StorageKey, Flight>>,
    pub(super) next_id: AtomicU64,
    /// How many flights there are: an owner that finishes looks for waiters only when some
    /// key has any (one atomic load otherwise).
    pub(super) active: AtomicUsize,
}

impl std::fmt::Debug for Waits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waits")
            .field("active", &self.active.load(Ordering::Relaxed))
            .finish()
    }
}

/// What a duplicate that found its key in flight does next.
pub(super) enum Join {
    /// Wait for the flight's landing, then retry after this long if it did not land.
    Wait(watch::Receiver<Landing>, Waiter, Duration),
    /// The key has too many waiters: answer "in flight" now, retry after this long.
    Full(Duration),
    /// A flight of another fingerprint: claim, the store answers.
    Claim,
}

/// What the reads of a new flight need: its id, its landing (to see it end) and its wake-up.
pub(super) struct FlightReads {
    pub(super) id: u64,
    pub(super) landing: watch::Receiver<Landing>,
    pub(super) wake: Arc<Notify>,
}

/// One duplicate's place in a flight; leaving it (dropped) frees the place, and the last one
/// to leave ends the flight (and its reads).
pub(super) struct Waiter {
    pub(super) waits: Arc<Waits>,
    pub(super) key: StorageKey,
    pub(super) flight: u64,
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
    pub(super) fn lock(&self) -> MutexGuard<'_, HashMap<StorageKey, Flight>> {
        self.flights.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Joins the flight of `key`, if there is one.
    pub(super) fn join_existing(
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
    pub(super) fn join_or_start(
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

    pub(super) fn enter(
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
    pub(super) fn land(&self, key: &StorageKey, id: u64, landing: Landing) {
        let mut flights = self.lock();
        if flights.get(key).is_some_and(|flight| flight.id == id)
            && let Some(flight) = flights.remove(key)
        {
            self.active.fetch_sub(1, Ordering::Relaxed);
            flight.landing.send_replace(landing);
        }
    }

    /// How many duplicates wait, over every key.
    pub(super) fn waiting(&self) -> usize {
        self.lock().values().map(|flight| flight.waiters).sum()
    }
}
