//! The records of the leases this process holds, for native compare-and-set steps.
//!
//! On servers with `SET … IFEQ` (Valkey 8.1, Redis 8.4), `complete` and `touch` are one native
//! command each: `SET k <new record> IFEQ <in-progress record> PX ms`. The compare needs the
//! record's exact bytes, which this process wrote: the native claim of a new key, and every
//! touch after it, keep them here until the lease is completed or released. A lease whose
//! record is not held here (a takeover, which the claim script writes; more than [`CAPACITY`]
//! leases at once) and a server without `IFEQ` use the scripts, as on Redis 7.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::codec::{self, HEADER};
use idempotency_core::StorageKey;

/// Most records held at once; leases beyond use the scripts.
const CAPACITY: usize = 1 << 16;
const SHARDS: usize = 16;

const UNKNOWN: u8 = 0;
const NATIVE: u8 = 1;
const SCRIPT: u8 = 2;

/// Held records by key: the lease's token and the in-progress record's bytes.
type Records = HashMap<StorageKey, (u64, Vec<u8>)>;

/// The in-progress records of held leases.
pub(super) struct Held {
    shards: Box<[Mutex<Records>]>,
    len: AtomicUsize,
    /// Whether the server has `SET … IFEQ`: unknown until the first native step answers.
    support: AtomicU8,
}

impl Held {
    pub(super) fn new() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            len: AtomicUsize::new(0),
            support: AtomicU8::new(UNKNOWN),
        }
    }

    /// Whether a native complete may be tried (the server was not found without it).
    pub(super) fn native(&self) -> bool {
        self.support.load(Ordering::Relaxed) != SCRIPT
    }

    /// Records whether the server has `SET … IFEQ`; without it nothing is held any more.
    pub(super) fn supported(&self, native: bool) {
        self.support
            .store(if native { NATIVE } else { SCRIPT }, Ordering::Relaxed);
        if !native {
            for shard in self.shards.iter() {
                let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
                self.len.fetch_sub(shard.len(), Ordering::Relaxed);
                shard.clear();
            }
        }
    }

    fn shard(&self, key: &StorageKey) -> MutexGuard<'_, Records> {
        self.shards[(key.spread() >> 32) as usize % SHARDS]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Holds the record a claim of `key` with `token` wrote.
    pub(super) fn hold(&self, key: &StorageKey, token: u64, record: Vec<u8>) {
        // Every record has its header; `codec::renewed` and `codec::completed_from` rely on it.
        if !self.native() || record.len() < HEADER {
            return;
        }
        let mut shard = self.shard(key);
        if let Some(held) = shard.get_mut(key) {
            *held = (token, record);
        } else if self.len.load(Ordering::Relaxed) < CAPACITY {
            shard.insert(*key, (token, record));
            self.len.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The record held for `key`'s lease `token`, no longer held.
    pub(super) fn take(&self, key: &StorageKey, token: u64) -> Option<Vec<u8>> {
        let mut shard = self.shard(key);
        let (held, _) = shard.get(key)?;
        if *held != token {
            return None;
        }
        self.len.fetch_sub(1, Ordering::Relaxed);
        shard.remove(key).map(|(_, record)| record)
    }

    /// A copy of the record held for `key`'s lease `token`, still held.
    pub(super) fn get(&self, key: &StorageKey, token: u64) -> Option<Vec<u8>> {
        match self.shard(key).get(key) {
            Some((held, record)) if *held == token => Some(record.clone()),
            _ => None,
        }
    }

    /// Forgets the record of `key`, whatever its lease.
    pub(super) fn forget(&self, key: &StorageKey) {
        if self.shard(key).remove(key).is_some() {
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// A touch of `key`'s lease `token` rewrote its lease fields (bytes 53..77) to `fields`.
    pub(super) fn touched(&self, key: &StorageKey, token: u64, fields: &[u8; 24]) {
        if let Some((held, record)) = self.shard(key).get_mut(key)
            && *held == token
        {
            *record = codec::renewed(record, fields);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> StorageKey {
        StorageKey([byte; 32])
    }

    /// A record of `HEADER + 2` bytes, all `byte`.
    fn record(byte: u8) -> Vec<u8> {
        vec![byte; HEADER + 2]
    }

    #[test]
    fn a_record_is_taken_once_and_only_with_its_token() {
        let held = Held::new();
        held.hold(&key(1), 7, record(1));
        assert_eq!(held.get(&key(1), 8), None);
        assert_eq!(held.get(&key(1), 7), Some(record(1)));
        assert_eq!(held.take(&key(1), 8), None);
        assert_eq!(held.take(&key(1), 7), Some(record(1)));
        assert_eq!(held.take(&key(1), 7), None);
        assert_eq!(held.len.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_record_shorter_than_a_header_is_not_held() {
        let held = Held::new();
        held.hold(&key(4), 7, vec![0; HEADER - 1]);
        assert_eq!(held.take(&key(4), 7), None);
    }

    #[test]
    fn without_native_support_nothing_is_held() {
        let held = Held::new();
        held.hold(&key(1), 7, record(1));
        held.supported(false);
        assert_eq!(held.take(&key(1), 7), None);
        held.hold(&key(2), 8, record(2));
        assert_eq!(held.take(&key(2), 8), None);
        assert_eq!(held.len.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_touch_rewrites_the_held_lease_fields() {
        let held = Held::new();
        held.hold(&key(3), 9, record(0));
        held.touched(&key(3), 9, &[5; 24]);
        held.touched(&key(3), 10, &[6; 24]);
        let record = held.take(&key(3), 9).unwrap();
        assert!(record[53..77].iter().all(|byte| *byte == 5));
        assert!(
            record[..53]
                .iter()
                .chain(&record[77..])
                .all(|byte| *byte == 0)
        );
    }
}
