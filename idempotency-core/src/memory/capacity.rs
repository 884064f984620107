//! What bounds the memory store: how many records it holds, and how many bytes of stored
//! responses. New keys are refused beyond either bound; keys already held are still answered,
//! and work in flight is always recorded.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::StoreError;

/// How many records a [`MemoryStore`](super::MemoryStore) holds by default: one million.
pub const DEFAULT_MEMORY_MAX_RECORDS: usize = 1_000_000;

/// How many bytes of stored responses a [`MemoryStore`](super::MemoryStore) holds by default:
/// 256 MiB. A new key is refused once they are reached; a response being completed is still
/// stored (so the bound may be passed by the responses of the requests in flight).
pub const DEFAULT_MEMORY_MAX_BYTES: usize = 256 * 1024 * 1024;

/// The counts and bounds of one store.
#[derive(Debug)]
pub(super) struct Capacity {
    pub(super) max_records: usize,
    pub(super) max_bytes: usize,
    records: AtomicUsize,
    bytes: AtomicUsize,
}

impl Capacity {
    pub(super) fn new(max_records: usize, max_bytes: usize) -> Self {
        Self {
            max_records,
            max_bytes,
            records: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
        }
    }

    /// How many records are held.
    pub(super) fn records(&self) -> usize {
        self.records.load(Ordering::Relaxed)
    }

    /// How many bytes of stored responses are held.
    pub(super) fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Takes room for one more record, if both bounds allow it (one atomic step).
    pub(super) fn try_reserve(&self) -> bool {
        if self.bytes() >= self.max_bytes {
            return false;
        }
        self.records
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |records| {
                (records < self.max_records).then_some(records + 1)
            })
            .is_ok()
    }

    /// Counts a stored response of `len` bytes.
    pub(super) fn stored(&self, len: usize) {
        self.bytes.fetch_add(len, Ordering::Relaxed);
    }

    /// Counts a stored response of `len` bytes dropped (its record stays).
    pub(super) fn dropped(&self, len: usize) {
        self.bytes.fetch_sub(len, Ordering::Relaxed);
    }

    /// Counts `records` records removed, holding `bytes` bytes of responses between them.
    pub(super) fn removed(&self, records: usize, bytes: usize) {
        self.records.fetch_sub(records, Ordering::Relaxed);
        self.bytes.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// The refusal of a new key, logged and counted
    /// ([`MEMORY_STORE_FULL`](crate::metrics::MEMORY_STORE_FULL)).
    pub(super) fn refuse(&self) -> StoreError {
        tracing::warn!(
            records = self.records(),
            max_records = self.max_records,
            bytes = self.bytes(),
            max_bytes = self.max_bytes,
            "memory store full: new keys are refused until records expire"
        );
        metrics::counter!(crate::metrics::MEMORY_STORE_FULL).increment(1);
        StoreError::CapacityExceeded(self.max_records)
    }
}
