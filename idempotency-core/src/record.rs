//! The record a store keeps per key.

use bytes::Bytes;
use std::time::SystemTime;

use crate::{Fingerprint, Mechanism, StorageKey};

/// A fencing token: strictly greater for every new owner of a key, so a stale owner (one whose
/// lease expired and was taken over) can be told apart and refused.
///
/// Only a store issues one (with each [`Claim::Acquired`](crate::Claim::Acquired)); a caller
/// holds it in its [`Execution`](crate::Execution) and never makes one up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(u64);

impl FencingToken {
    /// The token a store issued as `value`: for [`Store`](crate::Store) implementations, which
    /// keep the value with the record and compare it on every fenced call.
    pub const fn new(value: u64) -> Self {
        Self(value)
    }

    /// The value, as the store keeps it.
    pub const fn get(self) -> u64 {
        self.0
    }
}

/// The claimer's own name for one claim: chosen at random before the claim is sent, kept by the
/// store with the claim, so that a claim whose answer never came (a timeout, a reset
/// connection) can be undone exactly, once the store answers again, without touching anyone
/// else's claim of the key ([`Store::undo_claim`](crate::Store::undo_claim)).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClaimId([u8; 16]);

impl ClaimId {
    /// A new claim id, unique with overwhelming probability: a per-thread random 128-bit base
    /// (from the OS, once) and a counter, mixed (no system call per claim).
    pub fn random() -> Self {
        thread_local! {
            static NEXT: std::cell::Cell<(u64, u64)> = std::cell::Cell::new({
                let mut seed = [0u8; 16];
                // A failure leaves zeros: the ids of this thread then differ from each other
                // still, and only the exactness of an undo across processes weakens.
                let _ = getrandom::fill(&mut seed);
                let (high, low) = seed.split_at(8);
                (
                    u64::from_le_bytes(high.try_into().unwrap_or_default()),
                    u64::from_le_bytes(low.try_into().unwrap_or_default()),
                )
            });
        }
        let (base, count) = NEXT.with(|next| {
            let (base, count) = next.get();
            next.set((base, count.wrapping_add(1)));
            (base, count)
        });
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&mix(base ^ count).to_le_bytes());
        bytes[8..].copy_from_slice(&mix(count.wrapping_add(base.rotate_left(32))).to_le_bytes());
        Self(bytes)
    }

    /// The id's bytes, as stores keep them.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// The id of these bytes (as a store read them back).
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(bytes)
    }
}

/// SplitMix64's finalizer: every output bit depends on every input bit.
fn mix(mut value: u64) -> u64 {
    value = (value ^ (value >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    value = (value ^ (value >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    value ^ (value >> 31)
}

impl std::fmt::Debug for ClaimId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClaimId({})", hex::encode(&self.0[..6]))
    }
}

/// The stored result of a completed execution.
///
/// `status` is the front end's status (HTTP status, gRPC code, 0 for functions) kept for
/// reconciliation; `body` is the front end's own encoding of what it replays.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The status code the first execution answered with.
    pub status: u16,
    /// The encoded response or value, replayed as is.
    pub body: Bytes,
}

impl Outcome {
    /// An outcome with a status and an encoded body.
    pub fn new(status: u16, body: impl Into<Bytes>) -> Self {
        Self {
            status,
            body: body.into(),
        }
    }
}

/// Where a record is in its lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecordState {
    /// An owner holds the key under a lease.
    InProgress,
    /// The first execution finished and its outcome is stored.
    Completed,
}

impl RecordState {
    /// `"in_progress"` or `"completed"`, as SQL stores write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InProgress => "in_progress",
            Self::Completed => "completed",
        }
    }

    /// Parses [`RecordState::as_str`]'s output.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "in_progress" => Some(Self::InProgress),
            "completed" => Some(Self::Completed),
            _ => None,
        }
    }
}

/// Everything a store keeps for one key: enough to replay and to reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The hashed, scoped key.
    pub key: StorageKey,
    /// The scope's namespace, in the clear.
    pub namespace: String,
    /// What the key was first used with.
    pub fingerprint: Fingerprint,
    /// Lifecycle state.
    pub state: RecordState,
    /// The current owner's fencing token.
    pub token: FencingToken,
    /// How many owners have claimed the key (1 + takeovers and re-claims after release).
    pub attempts: u32,
    /// When the record was first created.
    pub created_at: SystemTime,
    /// When the record was last written.
    pub updated_at: SystemTime,
    /// When it was completed, if it was.
    pub completed_at: Option<SystemTime>,
    /// In progress: when the lease ends. Completed: when the record expires.
    pub expires_at: SystemTime,
    /// The stored outcome, once completed.
    pub outcome: Option<Outcome>,
    /// How many conflicting duplicates (the key again with another fingerprint) met this
    /// record ([`Store::mark_conflict`](crate::Store::mark_conflict)): a record worth
    /// reconciling when not 0.
    pub conflicts: u32,
    /// When the last conflicting duplicate came, if one did.
    pub last_conflict_at: Option<SystemTime>,
    /// The front end that wrote the record; `None` for records written before records said it
    /// (or by a caller that did not).
    pub mechanism: Option<Mechanism>,
    /// The version of the key derivation that derived its key (1: every mechanism keyed as a
    /// request, as release 0.1 did; 2: keyed by mechanism; 3: consumers keyed as messages in
    /// both tiers; see [`Mechanism`]); `None` for records written before records said it.
    pub key_derivation: Option<u8>,
    /// What a run with steps checkpointed (its completed steps, the input a resume needs);
    /// `None` for a record without steps, and on stores that do not keep steps.
    pub progress: Option<crate::Progress>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_ids_differ() {
        let ids: std::collections::HashSet<ClaimId> =
            (0..10_000).map(|_| ClaimId::random()).collect();
        assert_eq!(ids.len(), 10_000);
        let other_thread = std::thread::spawn(ClaimId::random)
            .join()
            .unwrap_or(ClaimId([0; 16]));
        assert!(!ids.contains(&other_thread));
    }
}
