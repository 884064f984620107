//! Keys this process saw completed: a hint that lets a front end or a store answer a duplicate
//! by one read instead of a claim that prepares a write.
//!
//! The Redis store claims a key seen completed with a plain `GET` (a claim is `SET … NX GET`,
//! which carries a whole record and makes the server prepare a write); transactional HTTP
//! answers its duplicate by one read of the record, outside any transaction. A record found is
//! decided exactly as the claim would have decided it; a key found gone (expired, deleted) is
//! forgotten here and claimed after all, one extra round trip in that case only.
//!
//! This is a hint, never the truth: a fixed table of 8-byte tags, one per slot, where a newer
//! key may overwrite an older one. A tag found wrongly costs at most the one extra round trip.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::StorageKey;

/// Slots in the table (8 bytes each).
const SLOTS: usize = 1 << 14;

/// Keys seen completed (a hint: see the module docs), by an 8-byte tag in a slot chosen by
/// other bits of the key: 16 384 slots, 128 KiB. Lock-free; shared by reference.
///
/// ```
/// use idempotency_core::{CompletedKeys, Scope};
///
/// let completed = CompletedKeys::new();
/// let key = Scope::new("orders").storage_key_for(idempotency_core::Mechanism::Request, "k-1");
/// completed.remember(&key);
/// assert!(completed.knows(&key));
/// completed.forget(&key);
/// assert!(!completed.knows(&key));
/// ```
pub struct CompletedKeys {
    slots: Box<[AtomicU64]>,
}

impl Default for CompletedKeys {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for CompletedKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletedKeys").finish_non_exhaustive()
    }
}

impl CompletedKeys {
    /// An empty table.
    pub fn new() -> Self {
        Self {
            slots: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The key's slot and its tag (never 0, which marks an empty slot), from all of its bytes
    /// ([`StorageKey::spread`]).
    fn slot(&self, key: &StorageKey) -> (&AtomicU64, u64) {
        let spread = key.spread();
        let index = (spread >> 40) as usize % SLOTS;
        (&self.slots[index], spread | 1)
    }

    /// Remembers that `key` was completed.
    pub fn remember(&self, key: &StorageKey) {
        let (slot, tag) = self.slot(key);
        slot.store(tag, Ordering::Relaxed);
    }

    /// Whether `key` was seen completed (and not forgotten or overwritten since).
    pub fn knows(&self, key: &StorageKey) -> bool {
        let (slot, tag) = self.slot(key);
        slot.load(Ordering::Relaxed) == tag
    }

    /// Forgets `key` (its record was found gone), leaving another key's tag in place.
    pub fn forget(&self, key: &StorageKey) {
        let (slot, tag) = self.slot(key);
        let _ = slot.compare_exchange(tag, 0, Ordering::Relaxed, Ordering::Relaxed);
    }
}
