//! Counters of verdicts, per consumer.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::Verdict;

/// Live verdict counters of one consumer (see [`IdempotentConsumer::stats`](crate::IdempotentConsumer::stats)).
#[derive(Debug, Default)]
pub struct Stats {
    processed: AtomicU64,
    unrecorded: AtomicU64,
    replayed: AtomicU64,
    already_done: AtomicU64,
    conflicts: AtomicU64,
    in_flight: AtomicU64,
    failed: AtomicU64,
    store_unavailable: AtomicU64,
    rejected: AtomicU64,
}

/// A copy of [`Stats`] at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Handler ran and succeeded (recorded or not).
    pub processed: u64,
    /// Of `processed`, those whose outcome could not be stored.
    pub unrecorded: u64,
    /// Acked with the stored outcome replayed.
    pub replayed: u64,
    /// Acked because the handler's record of truth said the work was done.
    pub already_done: u64,
    /// Acked as conflicting copies (the key used before with other fingerprinted content).
    pub conflicts: u64,
    /// Requeued because another consumer held the key.
    pub in_flight: u64,
    /// Handler failures, requeued.
    pub failed: u64,
    /// Store failures, requeued.
    pub store_unavailable: u64,
    /// Rejected for good.
    pub rejected: u64,
}

impl StatsSnapshot {
    /// Deliveries that were acked (processed, replayed, already done, conflicts).
    pub fn acked(&self) -> u64 {
        self.processed + self.replayed + self.already_done + self.conflicts
    }
}

impl Stats {
    pub(crate) fn record(&self, verdict: &Verdict) {
        let counter = match verdict {
            Verdict::Processed { recorded, .. } => {
                if !recorded {
                    self.unrecorded.fetch_add(1, Ordering::Relaxed);
                }
                &self.processed
            }
            Verdict::Replayed { .. } => &self.replayed,
            Verdict::AlreadyDone { .. } => &self.already_done,
            Verdict::Conflict => &self.conflicts,
            Verdict::InFlight { .. } => &self.in_flight,
            Verdict::Failed { .. } => &self.failed,
            Verdict::StoreUnavailable { .. } => &self.store_unavailable,
            Verdict::Rejected(_) => &self.rejected,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn snapshot(&self) -> StatsSnapshot {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        StatsSnapshot {
            processed: load(&self.processed),
            unrecorded: load(&self.unrecorded),
            replayed: load(&self.replayed),
            already_done: load(&self.already_done),
            conflicts: load(&self.conflicts),
            in_flight: load(&self.in_flight),
            failed: load(&self.failed),
            store_unavailable: load(&self.store_unavailable),
            rejected: load(&self.rejected),
        }
    }
}
