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

    /// The key's slot and its tag (never 0, which marks an empty slot), from all of its bytes
    /// ([`StorageKey::spread`]).
    fn slot(&self, key: &StorageKey) -> (&AtomicU64, u64) {
        let spread = key.spread();
        let index = (spread >> 40) as usize % SLOTS;
        (&self.slots[index], spread | 1)
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

    fn key(byte: u8) -> StorageKey {
        StorageKey([byte; 32])
    }

    /// Two keys that share a slot of `settled`.
    fn sharing_a_slot(settled: &Settled) -> (StorageKey, StorageKey) {
        let counter = |n: u32| {
            let mut key = key(0);
            key.0[..4].copy_from_slice(&n.to_le_bytes());
            key
        };
        let first = counter(0);
        let (slot, _) = settled.slot(&first);
        let second = (1..)
            .map(counter)
            .find(|other| std::ptr::eq(settled.slot(other).0, slot))
            .expect("some counter shares the slot");
        (first, second)
    }

    #[test]
    fn a_key_is_known_once_remembered_until_forgotten() {
        let settled = Settled::new();
        assert!(!settled.knows(&key(2)));
        settled.remember(&key(2));
        assert!(settled.knows(&key(2)));
        assert!(!settled.knows(&key(4)), "another key");
        settled.forget(&key(2));
        assert!(!settled.knows(&key(2)));
    }

    #[test]
    fn keys_sharing_a_slot_overwrite_and_do_not_forget_each_other() {
        let settled = Settled::new();
        let (first, second) = sharing_a_slot(&settled);
        settled.remember(&first);
        settled.remember(&second);
        assert!(!settled.knows(&first), "overwritten");
        assert!(settled.knows(&second));
        settled.forget(&first);
        assert!(settled.knows(&second), "another key's tag stays");
    }

    #[test]
    fn keys_alike_but_in_their_last_byte_are_told_apart() {
        let settled = Settled::new();
        let mut counter = StorageKey([7; 32]);
        settled.remember(&counter);
        for last in 0..=u8::MAX {
            counter.0[31] = last;
            assert_eq!(settled.knows(&counter), last == 7, "last byte {last}");
        }
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
