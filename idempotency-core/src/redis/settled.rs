//! Keys this process saw completed, so that their next claims are a plain `GET`.
//!
//! A claim is `SET k <in-progress record> NX GET`, which can create the key: it carries a whole
//! record and makes the server prepare a write. A completed record stays as it is until it
//! expires, so a key seen completed is most likely still completed when its duplicate comes: its
//! claim reads it with `GET` instead, still one round trip. A record found is decided exactly
//! as the `SET` would have decided it (which changes nothing on an existing key); a key found
//! gone (expired, deleted) is forgotten here and claimed with the `SET` after all, a second
//! round trip in that case only.
//!
//! This is a hint, never the truth: a fixed table of 8-byte tags, one per slot, where a newer
//! key may overwrite an older one. A tag found wrongly costs at most the one extra round trip.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::StorageKey;

/// Slots in the table (8 bytes each).
const SLOTS: usize = 1 << 14;

/// Keys seen completed, by an 8-byte tag in a slot chosen by other bytes of the key.
pub(super) struct Settled {
    slots: Box<[AtomicU64]>,
}

impl Settled {
    pub(super) fn new() -> Self {
        Self {
            slots: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The key's slot and its tag (never 0, which marks an empty slot). Storage keys are
    /// digests, so any of their bytes are uniform.
    fn slot(&self, key: &StorageKey) -> (&AtomicU64, u64) {
        let [a, b, c, d, e, f, g, h, i, j, ..] = key.0;
        let tag = u64::from_le_bytes([a, b, c, d, e, f, g, h]) | 1;
        let index = usize::from(u16::from_le_bytes([i, j])) % SLOTS;
        (&self.slots[index], tag)
    }

    /// Remembers that `key` was completed.
    pub(super) fn remember(&self, key: &StorageKey) {
        let (slot, tag) = self.slot(key);
        slot.store(tag, Ordering::Relaxed);
    }

    /// Whether `key` was seen completed (and not forgotten or overwritten since).
    pub(super) fn knows(&self, key: &StorageKey) -> bool {
        let (slot, tag) = self.slot(key);
        slot.load(Ordering::Relaxed) == tag
    }

    /// Forgets `key` (its record was found gone), leaving another key's tag in place.
    pub(super) fn forget(&self, key: &StorageKey) {
        let (slot, tag) = self.slot(key);
        let _ = slot.compare_exchange(tag, 0, Ordering::Relaxed, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(tag: u8, slot: u8) -> StorageKey {
        let mut key = StorageKey([tag; 32]);
        key.0[8] = slot;
        key.0[9] = 0;
        key
    }

    #[test]
    fn a_key_is_known_once_remembered_until_forgotten() {
        let settled = Settled::new();
        assert!(!settled.knows(&key(2, 1)));
        settled.remember(&key(2, 1));
        assert!(settled.knows(&key(2, 1)));
        assert!(!settled.knows(&key(4, 2)), "another key, another slot");
        settled.forget(&key(2, 1));
        assert!(!settled.knows(&key(2, 1)));
    }

    #[test]
    fn keys_sharing_a_slot_overwrite_and_do_not_forget_each_other() {
        let settled = Settled::new();
        settled.remember(&key(2, 1));
        settled.remember(&key(4, 1));
        assert!(!settled.knows(&key(2, 1)), "overwritten");
        assert!(settled.knows(&key(4, 1)));
        settled.forget(&key(2, 1));
        assert!(settled.knows(&key(4, 1)), "another key's tag stays");
    }

    #[test]
    fn an_all_zero_key_is_still_remembered() {
        let settled = Settled::new();
        let zero = StorageKey([0; 32]);
        assert!(!settled.knows(&zero));
        settled.remember(&zero);
        assert!(settled.knows(&zero));
    }
}
