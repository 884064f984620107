//! The keys this layer saw completed: their duplicates are answered by one read of the record,
//! outside any transaction and without waiting for a turn.

use std::sync::atomic::{AtomicU64, Ordering};

use idempotency_core::StorageKey;

/// How many keys the table remembers (128 KiB of tags).
const SLOTS: usize = 16_384;

/// A fixed table of key tags, lock-free: a newer key may overwrite an older one in its slot. It
/// is only a hint: a key it forgot costs the claim's usual path, one it remembers wrongly (its
/// record expired or purged since) one extra read.
pub(crate) struct Settled {
    tags: Box<[AtomicU64]>,
}

impl Default for Settled {
    fn default() -> Self {
        Self {
            tags: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl Settled {
    /// The slot and the tag of `key` (a digest: its bytes are uniform); never the empty tag 0.
    fn place(key: &StorageKey) -> (usize, u64) {
        let bytes = key.as_bytes();
        let (mut slot, mut tag) = ([0u8; 8], [0u8; 8]);
        slot.copy_from_slice(&bytes[..8]);
        tag.copy_from_slice(&bytes[8..16]);
        let slot = usize::try_from(u64::from_le_bytes(slot) % SLOTS as u64).unwrap_or(0);
        (slot, u64::from_le_bytes(tag) | 1)
    }

    /// Remembers that `key` was completed.
    pub(crate) fn insert(&self, key: &StorageKey) {
        let (slot, tag) = Self::place(key);
        self.tags[slot].store(tag, Ordering::Relaxed);
    }

    /// Whether `key` was seen completed (maybe: see [`Settled`]).
    pub(crate) fn contains(&self, key: &StorageKey) -> bool {
        let (slot, tag) = Self::place(key);
        self.tags[slot].load(Ordering::Relaxed) == tag
    }

    /// Forgets `key` (its record is gone).
    pub(crate) fn remove(&self, key: &StorageKey) {
        let (slot, tag) = Self::place(key);
        let _ = self.tags[slot].compare_exchange(tag, 0, Ordering::Relaxed, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_and_forgets() {
        let settled = Settled::default();
        let (a, b) = (StorageKey([7; 32]), StorageKey([9; 32]));
        assert!(!settled.contains(&a));
        settled.insert(&a);
        assert!(settled.contains(&a) && !settled.contains(&b));
        settled.remove(&a);
        assert!(!settled.contains(&a));
    }
}
