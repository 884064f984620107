//! Reading the memory store's records in bounded batches, shard by shard, and deleting one
//! by its fencing token: what operations (`idempotency-operations`) need of the store.

use std::time::Duration;

use super::{MemoryStore, SHARDS};
use crate::{FencingToken, Record, StorageKey};

impl MemoryStore {
    /// How many shards the records are spread over; [`scan_shard`](Self::scan_shard) reads
    /// one at a time.
    pub const SHARDS: usize = SHARDS;

    /// Up to `batch` (at least one) records of shard `shard` whose storage keys come after
    /// `after`, in storage-key order, and whether the shard holds more. The shard's lock is
    /// held while they are chosen and copied, so a scan resumes after the last key taken
    /// whatever was inserted or removed meanwhile. A shard past the last reads nothing.
    pub fn scan_shard(
        &self,
        shard: usize,
        after: Option<StorageKey>,
        batch: usize,
    ) -> (Vec<Record>, bool) {
        if shard >= SHARDS {
            return (Vec::new(), false);
        }
        let batch = batch.max(1);
        let shard = self.records.lock_index(shard);
        let mut taken: Vec<_> = shard
            .map
            .iter()
            .filter(|slot| after.is_none_or(|after| slot.keyed.key > after))
            .collect();
        let more = taken.len() > batch;
        if more {
            taken.select_nth_unstable_by_key(batch - 1, |slot| slot.keyed.key);
            taken.truncate(batch);
        }
        taken.sort_unstable_by_key(|slot| slot.keyed.key);
        let records = taken
            .iter()
            .map(|slot| {
                shard
                    .marks
                    .apply(slot.keyed.value.to_record(slot.keyed.key))
            })
            .collect();
        (records, more)
    }

    /// Deletes the record of `key`, whatever its state, if its fencing token is still `token`;
    /// whether it did.
    pub fn delete_fenced(&self, key: &StorageKey, token: FencingToken) -> bool {
        let mut shard = self.records.lock(key);
        let deleted = shard.get(key).is_some_and(|entry| entry.token == token);
        if deleted && let Some(removed) = shard.remove(key) {
            self.forget(&removed);
        }
        deleted
    }

    /// How long an abandoned record stays before a purge may delete it
    /// ([`with_abandoned_grace`](Self::with_abandoned_grace)).
    pub fn abandoned_grace(&self) -> Duration {
        self.abandoned_grace
    }
}
