//! The memory store's wake-ups ([`Store::wake_ups`](crate::Store::wake_ups)): the duplicates
//! waiting in any engine that shares the store are woken when a key in flight is completed or
//! its record removed (released, undone, deleted, purged, evicted). Kept per shard beside the
//! records, as the conflict marks are: one channel per key with waiters, told under the
//! shard's lock that the write already holds.

use std::collections::HashMap;

use tokio::sync::watch;

use crate::StorageKey;

/// A shard's keys in flight that engines wait on, by storage key.
#[derive(Default)]
pub(super) struct Waiting(HashMap<StorageKey, watch::Sender<()>>);

impl Waiting {
    /// A receiver of the wake-ups of `key`, whose record is in flight: one channel per key,
    /// however many engines wait on it.
    pub(super) fn subscribe(&mut self, key: StorageKey) -> watch::Receiver<()> {
        self.0
            .entry(key)
            .or_insert_with(|| watch::channel(()).0)
            .subscribe()
    }

    /// Wakes the waiters of `key`: its record landed (completed or removed). The channel ends
    /// with it: they read the record and answer, and a wait on the key's next flight subscribes
    /// anew.
    pub(super) fn wake(&mut self, key: &StorageKey) {
        if !self.0.is_empty()
            && let Some(wake) = self.0.remove(key)
        {
            wake.send_replace(());
        }
    }

    /// Wakes the waiters of every key `keep` no longer holds (records evicted).
    pub(super) fn wake_unless(&mut self, mut keep: impl FnMut(&StorageKey) -> bool) {
        self.0.retain(|key, wake| {
            let kept = keep(key);
            if !kept {
                wake.send_replace(());
            }
            kept
        });
    }
}

/// A receiver whose channel is already closed: for a key with no record in flight, whose
/// waiters' next read answers them (nothing will be told).
pub(super) fn closed() -> watch::Receiver<()> {
    watch::channel(()).1
}
