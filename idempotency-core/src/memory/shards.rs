//! The sharded hash tables behind the memory store: keys spread over 64 locked shards.

use std::hash::BuildHasher;
use std::sync::{Mutex, MutexGuard, PoisonError};

use hashbrown::{HashTable, hash_table};

use super::conflicts::Marks;
use super::digest_hashing::DigestHashing;
use super::wake_ups::Waiting;
use crate::StorageKey;

pub(super) const SHARDS: usize = 64;

/// A value with the whole storage key it is kept under.
pub(super) struct Keyed<V> {
    pub(super) key: StorageKey,
    pub(super) value: V,
}

/// A map slot: the 8 bytes of the storage key that the map hashes, beside the boxed value,
/// which holds the whole key.
///
/// 16 bytes: a growing map touches a random slot per new key, so the smaller the slots, the
/// more of them stay in the caches and the TLB; and growing it moves 16 bytes per record,
/// without reading the record (the word is what it hashes again).
pub(super) struct Slot<V> {
    pub(super) word: u64,
    pub(super) keyed: Box<Keyed<V>>,
}

impl<V> Slot<V> {
    pub(super) fn new(key: StorageKey, value: V) -> Self {
        Self {
            word: word_of(&key),
            keyed: Box::new(Keyed { key, value }),
        }
    }
}

/// The 8 bytes its map hashes for a storage key: [`StorageKey::spread`], which reads all 32
/// (its top bits also pick the shard). [`DigestHashing`]'s seed keeps the bucket of a key
/// unpredictable; equality compares all 32 bytes.
pub(super) fn word_of(key: &StorageKey) -> u64 {
    key.spread()
}

/// The shard of a storage key: the top bits of [`StorageKey::spread`].
pub(super) fn shard_of(key: &StorageKey) -> usize {
    (key.spread() >> 58) as usize % SHARDS
}

/// One shard: its map, and the namespace of its latest new record, which the next records of
/// the same namespace share instead of copying it.
pub(super) struct Shard<V> {
    pub(super) map: HashTable<Slot<V>>,
    pub(super) hashing: DigestHashing,
    pub(super) namespace: Option<SharedName>,
    /// The conflict marks of this shard's records, beside them: few records have one, and a
    /// field in every record would take it past its allocation size class.
    pub(super) marks: Marks,
    /// The wake-ups of this shard's keys that engines wait on, beside the records likewise.
    pub(super) waiting: Waiting,
}

impl<V> Shard<V> {
    pub(super) fn find(&self, key: &StorageKey) -> Option<&Keyed<V>> {
        let word = word_of(key);
        self.map
            .find(self.hashing.hash_one(word), matches(word, key))
            .map(|slot| &*slot.keyed)
    }

    pub(super) fn get(&self, key: &StorageKey) -> Option<&V> {
        self.find(key).map(|keyed| &keyed.value)
    }

    pub(super) fn get_mut(&mut self, key: &StorageKey) -> Option<&mut V> {
        let word = word_of(key);
        self.map
            .find_mut(self.hashing.hash_one(word), matches(word, key))
            .map(|slot| &mut slot.keyed.value)
    }

    /// The key's slot, taken or free, and the shard's shared namespace.
    pub(super) fn entry_and_namespace(
        &mut self,
        key: &StorageKey,
    ) -> (hash_table::Entry<'_, Slot<V>>, &mut Option<SharedName>) {
        let word = word_of(key);
        let hashing = self.hashing;
        let entry = self.map.entry(
            hashing.hash_one(word),
            matches(word, key),
            move |slot: &Slot<V>| hashing.hash_one(slot.word),
        );
        (entry, &mut self.namespace)
    }

    pub(super) fn remove(&mut self, key: &StorageKey) -> Option<V> {
        self.marks.forget(key);
        self.waiting.wake(key);
        let word = word_of(key);
        self.map
            .find_entry(self.hashing.hash_one(word), matches(word, key))
            .ok()
            .map(|slot| slot.remove().0.keyed.value)
    }

    pub(super) fn retain(&mut self, mut keep: impl FnMut(&V) -> bool) {
        self.map.retain(|slot| keep(&slot.keyed.value));
        let (map, hashing) = (&self.map, self.hashing);
        let held = |key: &StorageKey| {
            let word = word_of(key);
            map.find(hashing.hash_one(word), matches(word, key))
                .is_some()
        };
        if !self.marks.is_empty() {
            self.marks.retain(held);
        }
        self.waiting.wake_unless(held);
    }
}

/// Whether a slot holds `key` (whose hashed word is `word`): the word first, in the slot
/// itself; the whole key, in the box, only when the words match.
pub(super) fn matches<V>(word: u64, key: &StorageKey) -> impl Fn(&Slot<V>) -> bool + '_ {
    move |slot| slot.word == word && slot.keyed.key == *key
}

/// Maps split by key hash so concurrent keys rarely share a lock.
pub(super) struct Shards<V> {
    pub(super) shards: Box<[Mutex<Shard<V>>]>,
}

impl<V> Shards<V> {
    pub(super) fn new() -> Self {
        let hashing = DigestHashing::new();
        Self {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        map: HashTable::new(),
                        hashing,
                        namespace: None,
                        marks: Marks::default(),
                        waiting: Waiting::default(),
                    })
                })
                .collect(),
        }
    }

    pub(super) fn lock(&self, key: &StorageKey) -> MutexGuard<'_, Shard<V>> {
        let index = shard_of(key);
        self.shards[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The shard of index `index` (< [`SHARDS`]), locked: operations scan shard by shard.
    pub(super) fn lock_index(&self, index: usize) -> MutexGuard<'_, Shard<V>> {
        self.shards[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = MutexGuard<'_, Shard<V>>> {
        self.shards
            .iter()
            .map(|shard| shard.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// A namespace shared by the records of a shard: one pointer (8 bytes, where an `Arc<str>`
/// takes 16).
pub(super) type SharedName = std::sync::Arc<Box<str>>;
