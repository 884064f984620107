//! The in-process store: sharded maps with expiry, the embedded default.

mod capacity;
mod conflicts;
mod digest_hashing;
mod micros;
mod scan;
mod shards;
#[cfg(test)]
mod tests;
mod wake_ups;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use hashbrown::hash_table;

pub use self::capacity::{DEFAULT_MEMORY_MAX_BYTES, DEFAULT_MEMORY_MAX_RECORDS};

use self::capacity::Capacity;
use self::micros::Micros;
use self::shards::{SHARDS, Shards, SharedName, Slot};
use crate::{
    Claim, ClaimId, ClaimRequest, CompleteRequest, DEFAULT_ABANDONED_GRACE, FencingToken,
    Fingerprint, Lease, Outcome, Progress, Record, RecordState, StorageKey, Store, StoreError,
    TouchRequest,
};

/// What the store keeps per key: a [`Record`] without its key (the [`Keyed`] box's), packed:
/// a shared namespace, times in microseconds (8 bytes each, not 16), and the outcome's status
/// beside the state (its body alone is optional), and the claim's id. 136 bytes.
#[derive(Clone)]
struct Entry {
    namespace: SharedName,
    fingerprint: Fingerprint,
    state: RecordState,
    token: FencingToken,
    claim_id: ClaimId,
    attempts: u32,
    created_at: Micros,
    updated_at: Micros,
    /// [`Micros::NEVER`] until completed.
    completed_at: Micros,
    expires_at: Micros,
    /// The outcome's status; meaningful once `body` is set.
    status: u16,
    /// The outcome's encoded response, once completed; in progress, the run's checkpoints
    /// ([`Store::checkpoint`]), so the entry keeps its size.
    body: Option<Bytes>,
    /// [`Record::mechanism`] and [`Record::key_derivation`], packed in one byte ([`origin`]).
    origin: u8,
}

impl Entry {
    /// The completed outcome, if any.
    fn outcome(&self) -> Option<Outcome> {
        self.body
            .as_ref()
            .filter(|_| self.state == RecordState::Completed)
            .map(|body| Outcome::new(self.status, body.clone()))
    }

    /// The bytes of its stored response (none until completed).
    fn body_len(&self) -> usize {
        self.body.as_ref().map_or(0, Bytes::len)
    }

    fn to_record(&self, key: StorageKey) -> Record {
        Record {
            key,
            namespace: self.namespace.as_ref().to_string(),
            fingerprint: self.fingerprint,
            state: self.state,
            token: self.token,
            attempts: self.attempts,
            created_at: self.created_at.to_system_time(),
            updated_at: self.updated_at.to_system_time(),
            completed_at: self.completed_at.to_optional_system_time(),
            expires_at: self.expires_at.to_system_time(),
            outcome: self.outcome(),
            conflicts: 0,
            last_conflict_at: None,
            mechanism: origin::mechanism(self.origin),
            key_derivation: origin::derivation(self.origin),
            progress: (self.state == RecordState::InProgress)
                .then(|| self.body.as_deref().and_then(|b| Progress::decode(b).ok()))
                .flatten(),
        }
    }
}

/// An in-process [`Store`]: 64 independently locked shards, fencing tokens from one atomic
/// counter, expiry on read plus [`Store::purge_expired`] (or a [`crate::spawn_sweeper`] task).
///
/// Records live as long as the process: after a restart every key is new again. Use it for
/// tests, single-instance services and as the fast tier in front of a durable store. Engines
/// that share one (an `Arc<MemoryStore>`) wake each other's waiters when a key in flight lands
/// ([`Store::wake_ups`]).
///
/// [`Store::purge_expired`] removes completed records past their TTL and abandoned leases once
/// their end is [`with_abandoned_grace`](MemoryStore::with_abandoned_grace) ago, so the claim
/// after a crash still reports the takeover.
///
/// Bounded by default: at most [`DEFAULT_MEMORY_MAX_RECORDS`] records (one million) and
/// [`DEFAULT_MEMORY_MAX_BYTES`] of stored responses (256 MiB); change them with
/// [`with_capacity`](MemoryStore::with_capacity) and [`with_max_bytes`](MemoryStore::with_max_bytes).
/// When full, expired records (abandoned leases included, grace or not) are evicted first;
/// live records are never evicted (that would let a duplicate run again), so a full store
/// refuses new keys with [`StoreError::CapacityExceeded`] (the layer answers 503 +
/// `Retry-After`), logged and counted ([`MEMORY_STORE_FULL`](crate::metrics::MEMORY_STORE_FULL)).
/// Keys it holds are still answered, and work in flight is always recorded.
///
/// ```
/// use idempotency_core::MemoryStore;
/// let store = MemoryStore::with_capacity(100_000).with_max_bytes(64 * 1024 * 1024);
/// # let _ = store;
/// ```
pub struct MemoryStore {
    records: Shards<Entry>,
    next_token: AtomicU64,
    capacity: Capacity,
    abandoned_grace: Duration,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("max_records", &self.capacity.max_records)
            .field("max_bytes", &self.capacity.max_bytes)
            .field("abandoned_grace", &self.abandoned_grace)
            .finish_non_exhaustive()
    }
}

impl MemoryStore {
    /// A store with the default bounds ([`DEFAULT_MEMORY_MAX_RECORDS`],
    /// [`DEFAULT_MEMORY_MAX_BYTES`]).
    pub fn new() -> Self {
        Self {
            records: Shards::new(),
            // Seeded from the clock so tokens keep growing across restarts of the process.
            next_token: AtomicU64::new(Micros::now().get()),
            capacity: Capacity::new(DEFAULT_MEMORY_MAX_RECORDS, DEFAULT_MEMORY_MAX_BYTES),
            abandoned_grace: DEFAULT_ABANDONED_GRACE,
        }
    }

    /// How long [`Store::purge_expired`] keeps an in-progress record after its lease ended
    /// (default [`DEFAULT_ABANDONED_GRACE`], 1 h).
    pub fn with_abandoned_grace(mut self, grace: Duration) -> Self {
        self.abandoned_grace = grace;
        self
    }

    /// A store holding at most `max_records` records (and the default
    /// [`DEFAULT_MEMORY_MAX_BYTES`] of stored responses).
    pub fn with_capacity(max_records: usize) -> Self {
        Self {
            capacity: Capacity::new(max_records, DEFAULT_MEMORY_MAX_BYTES),
            ..Self::new()
        }
    }

    /// The same store, holding at most `max_bytes` bytes of stored responses: beyond them new
    /// keys are refused.
    pub fn with_max_bytes(mut self, max_bytes: usize) -> Self {
        self.capacity = Capacity::new(self.capacity.max_records, max_bytes);
        self
    }

    /// How many records are held now, expired ones included until purged.
    pub fn len(&self) -> usize {
        self.capacity.records()
    }

    /// How many bytes of stored responses are held now, expired ones included until purged.
    pub fn stored_bytes(&self) -> usize {
        self.capacity.bytes()
    }

    /// Whether no record is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn next_token(&self) -> FencingToken {
        FencingToken::new(self.next_token.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// Evicts expired records (all shards, abandoned leases included) to make room.
    fn evict_expired(&self) {
        let now = Micros::now();
        for mut shard in self.records.iter() {
            let (mut records, mut bytes) = (0, 0);
            shard.retain(|record| {
                let keep = record.expires_at > now;
                if !keep {
                    records += 1;
                    bytes += record.body_len();
                }
                keep
            });
            self.capacity.removed(records, bytes);
        }
    }

    /// Counts `entry` removed from the store.
    fn forget(&self, entry: &Entry) {
        self.capacity.removed(1, entry.body_len());
    }

    /// Whether a purge may delete `record`: a completed one past its TTL, an abandoned lease
    /// past its end plus the grace.
    fn purgeable(&self, record: &Entry, now: Micros) -> bool {
        match record.state {
            RecordState::Completed => record.expires_at <= now,
            RecordState::InProgress => record.expires_at.plus(self.abandoned_grace) <= now,
        }
    }

    /// Claims `request`'s key; a new key takes room within the bounds, and when there is none,
    /// expired records are evicted and the claim tried once more before it is refused. Keys
    /// the store holds are answered whether it is full or not.
    pub(crate) fn claim_now(&self, request: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        if let Some(claim) = self.claim_within_bounds(request) {
            return Ok(claim);
        }
        self.evict_expired();
        self.claim_within_bounds(request)
            .ok_or_else(|| self.capacity.refuse())
    }

    /// The claim, or `None` for a new key the store has no room for.
    fn claim_within_bounds(&self, request: ClaimRequest<'_>) -> Option<Claim> {
        let now = Micros::now();
        let mut shard = self.records.lock(request.key);
        // One lookup: the key's slot, taken or free.
        let (slot, namespace) = shard.entry_and_namespace(request.key);
        let record = match slot {
            hash_table::Entry::Occupied(slot) => &mut slot.into_mut().keyed.value,
            hash_table::Entry::Vacant(slot) => {
                if !self.capacity.try_reserve() {
                    return None;
                }
                let lease = Lease {
                    token: self.next_token(),
                    attempt: 1,
                    took_over: false,
                };
                let namespace = shared_namespace(namespace, request.namespace);
                slot.insert(Slot::new(
                    *request.key,
                    new_entry(namespace, request, lease, now, now),
                ));
                return Some(Claim::Acquired(lease));
            }
        };
        if record.expires_at > now {
            return Some(live_claim(record, request, now));
        }
        let took_over = record.state == RecordState::InProgress;
        // A takeover keeps the run's checkpoints, which only the same payload may resume.
        let progress = record.body.clone().filter(|_| took_over);
        if progress.is_some() && record.fingerprint != *request.fingerprint {
            return Some(Claim::Mismatch);
        }
        let lease = Lease {
            token: self.next_token(),
            attempt: if took_over { record.attempts + 1 } else { 1 },
            took_over,
        };
        let created_at = if took_over { record.created_at } else { now };
        self.capacity.dropped(record.body_len());
        let namespace = if **record.namespace == *request.namespace {
            Arc::clone(&record.namespace)
        } else {
            Arc::new(request.namespace.into())
        };
        *record = new_entry(namespace, request, lease, created_at, now);
        self.capacity
            .stored(progress.as_ref().map_or(0, Bytes::len));
        record.body = progress;
        Some(Claim::Acquired(lease))
    }

    /// Applies `change` to the in-progress record of `key` if `token` is current; wakes the
    /// key's waiters if the change `lands` it.
    fn update_owned(
        &self,
        key: &StorageKey,
        token: FencingToken,
        lands: Lands,
        change: impl FnOnce(&mut Entry, Micros),
    ) -> Result<(), StoreError> {
        let now = Micros::now();
        let mut shard = self.records.lock(key);
        match shard.get_mut(key) {
            Some(record) if owns(record, token) => change(record, now),
            _ => return Err(StoreError::LeaseLost),
        }
        if lands == Lands::Yes {
            shard.waiting.wake(key);
        }
        Ok(())
    }
}

/// Whether a write to an owned record lands it (its waiters are woken) or keeps it in flight.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lands {
    Yes,
    No,
}

/// Whether `token` holds the in-progress lease of `record`.
fn owns(record: &Entry, token: FencingToken) -> bool {
    record.token == token && record.state == RecordState::InProgress
}

/// `name`, shared with a shard's other records of that namespace (its latest new record's).
fn shared_namespace(shared: &mut Option<SharedName>, name: &str) -> SharedName {
    match shared {
        Some(namespace) if ***namespace == *name => Arc::clone(namespace),
        _ => Arc::clone(shared.insert(Arc::new(name.into()))),
    }
}

fn live_claim(record: &Entry, request: ClaimRequest<'_>, now: Micros) -> Claim {
    if record.fingerprint != *request.fingerprint {
        return Claim::Mismatch;
    }
    match (&record.state, record.outcome()) {
        (RecordState::Completed, Some(outcome)) => Claim::Completed(outcome),
        _ => Claim::InProgress {
            lease_remaining: record.expires_at.since(now),
        },
    }
}

fn new_entry(
    namespace: SharedName,
    request: ClaimRequest<'_>,
    lease: Lease,
    created_at: Micros,
    now: Micros,
) -> Entry {
    Entry {
        namespace,
        fingerprint: *request.fingerprint,
        state: RecordState::InProgress,
        token: lease.token,
        claim_id: request.claim_id,
        attempts: lease.attempt,
        created_at,
        updated_at: now,
        completed_at: Micros::NEVER,
        expires_at: now.plus(request.lease),
        status: 0,
        body: None,
        origin: origin::pack(request.mechanism, request.key_derivation),
    }
}

/// What wrote a record, in one byte (the entry stays within its allocation size): the
/// mechanism's place in [`Mechanism::ALL`] plus one in the high half (0: unknown), the key
/// derivation in the low half (0: unknown, or beyond 15).
mod origin {
    use crate::Mechanism;

    pub(super) fn pack(mechanism: Option<Mechanism>, derivation: Option<u8>) -> u8 {
        let mechanism = mechanism
            .and_then(|known| Mechanism::ALL.iter().position(|each| *each == known))
            .map_or(0, |place| place as u8 + 1);
        let derivation = derivation.filter(|version| *version <= 0x0f).unwrap_or(0);
        (mechanism << 4) | derivation
    }

    pub(super) fn mechanism(packed: u8) -> Option<Mechanism> {
        usize::from(packed >> 4)
            .checked_sub(1)
            .and_then(|place| Mechanism::ALL.get(place).copied())
    }

    pub(super) fn derivation(packed: u8) -> Option<u8> {
        Some(packed & 0x0f).filter(|version| *version != 0)
    }
}

impl Store for MemoryStore {
    async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        self.claim_now(request)
    }

    async fn complete(&self, request: CompleteRequest<'_>) -> Result<(), StoreError> {
        self.update_owned(request.key, request.token, Lands::Yes, |record, now| {
            record.state = RecordState::Completed;
            // A copy of the caller's bytes, exactly sized: sharing them instead (a `Bytes`
            // clone) would allocate a 32-byte counter kept with every record, and keep the
            // caller's buffer whatever its spare capacity.
            record.status = request.outcome.status;
            self.capacity.dropped(record.body_len());
            record.body = Some(Bytes::from(request.outcome.body.to_vec()));
            self.capacity.stored(request.outcome.body.len());
            record.completed_at = now;
            record.updated_at = now;
            record.expires_at = now.plus(request.ttl);
        })
    }

    async fn release(&self, key: &StorageKey, token: FencingToken) -> Result<(), StoreError> {
        let mut shard = self.records.lock(key);
        match shard.get(key) {
            Some(record) if owns(record, token) => {
                if let Some(removed) = shard.remove(key) {
                    self.forget(&removed);
                }
                Ok(())
            }
            _ => Err(StoreError::LeaseLost),
        }
    }

    /// Claims here end before their caller can give up (nothing is awaited), so none is ever
    /// left unanswered; the undo is exact all the same, as every store's.
    async fn undo_claim(&self, key: &StorageKey, claim_id: ClaimId) -> Result<bool, StoreError> {
        let mut shard = self.records.lock(key);
        let undone = shard.get(key).is_some_and(|record| {
            record.state == RecordState::InProgress && record.claim_id == claim_id
        });
        if undone && let Some(removed) = shard.remove(key) {
            self.forget(&removed);
        }
        Ok(undone)
    }

    async fn touch(&self, request: TouchRequest<'_>) -> Result<(), StoreError> {
        let TouchRequest { key, token, lease } = request;
        self.update_owned(key, token, Lands::No, |record, now| {
            record.expires_at = now.plus(lease);
            record.updated_at = now;
        })
    }

    async fn checkpoint(
        &self,
        request: TouchRequest<'_>,
        progress: &Progress,
    ) -> Result<(), StoreError> {
        let TouchRequest { key, token, lease } = request;
        self.update_owned(key, token, Lands::No, |record, now| {
            let encoded = Bytes::from(progress.encode());
            self.capacity.dropped(record.body_len());
            self.capacity.stored(encoded.len());
            record.body = Some(encoded);
            record.expires_at = now.plus(lease);
            record.updated_at = now;
        })
    }

    async fn get(&self, key: &StorageKey) -> Result<Option<Record>, StoreError> {
        let shard = self.records.lock(key);
        Ok(shard
            .get(key)
            .map(|entry| shard.marks.apply(entry.to_record(*key))))
    }

    async fn mark_conflict(&self, key: &StorageKey) -> Result<bool, StoreError> {
        Ok(self.mark_conflict_now(key))
    }

    /// Every engine sharing this store is woken when the key's record lands (completed, or
    /// removed); a key with no record in flight gets a closed receiver, as its waiters' next
    /// read answers them.
    async fn wake_ups(&self, key: &StorageKey) -> Option<tokio::sync::watch::Receiver<()>> {
        let mut shard = self.records.lock(key);
        let in_flight = shard
            .get(key)
            .is_some_and(|entry| entry.state == RecordState::InProgress);
        Some(if in_flight {
            shard.waiting.subscribe(*key)
        } else {
            wake_ups::closed()
        })
    }

    async fn purge_expired(&self, limit: usize) -> Result<u64, StoreError> {
        let now = Micros::now();
        let mut purged = 0usize;
        for mut shard in self.records.iter() {
            if purged >= limit {
                break;
            }
            let expired: Vec<StorageKey> = shard
                .map
                .iter()
                .filter(|slot| self.purgeable(&slot.keyed.value, now))
                .map(|slot| slot.keyed.key)
                .take(limit - purged)
                .collect();
            for key in &expired {
                if let Some(removed) = shard.remove(key) {
                    self.forget(&removed);
                }
            }
            purged += expired.len();
        }
        Ok(purged as u64)
    }
}

impl MemoryStore {
    /// Marks the record of `key`, if there is one.
    pub(super) fn mark_conflict_now(&self, key: &StorageKey) -> bool {
        let mut shard = self.records.lock(key);
        let Some(token) = shard.get(key).map(|entry| entry.token) else {
            return false;
        };
        shard.marks.add(*key, token, Micros::now());
        true
    }
}
