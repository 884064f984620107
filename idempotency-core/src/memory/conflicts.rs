//! The memory store's conflict marks ([`Store::mark_conflict`](crate::Store::mark_conflict)),
//! kept per shard beside the records rather than in each.

use std::collections::HashMap;

use super::micros::Micros;
use crate::{FencingToken, Record, StorageKey};

/// The mark of one record: it applies while the record under its key is still the one marked
/// (the same fencing token), so a claim that starts the record anew starts it unmarked.
#[derive(Clone, Copy, Debug)]
struct Mark {
    token: FencingToken,
    conflicts: u32,
    last: Micros,
}

/// A shard's conflict marks, by storage key.
#[derive(Default)]
pub(super) struct Marks(HashMap<StorageKey, Mark>);

impl Marks {
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Forgets the mark of a record removed.
    pub(super) fn forget(&mut self, key: &StorageKey) {
        if !self.0.is_empty() {
            self.0.remove(key);
        }
    }

    /// Keeps the marks of the keys `keep` holds.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&StorageKey) -> bool) {
        self.0.retain(|key, _| keep(key));
    }

    /// `record` with its mark, if it has one.
    pub(super) fn apply(&self, mut record: Record) -> Record {
        if let Some(mark) = self.0.get(&record.key)
            && mark.token == record.token
        {
            record.conflicts = mark.conflicts;
            record.last_conflict_at = mark.last.to_optional_system_time();
        }
        record
    }

    /// Counts one more conflict on the record of `key`, whose fencing token is `token`.
    pub(super) fn add(&mut self, key: StorageKey, token: FencingToken, now: Micros) {
        let mark = self.0.entry(key).or_insert(Mark {
            token,
            conflicts: 0,
            last: now,
        });
        if mark.token != token {
            *mark = Mark {
                token,
                conflicts: 0,
                last: now,
            };
        }
        mark.conflicts = mark.conflicts.saturating_add(1);
        mark.last = now;
    }
}
