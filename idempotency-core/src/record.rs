//! The record a store keeps per key.

use bytes::Bytes;
use std::time::SystemTime;

use crate::{Fingerprint, StorageKey};

/// A fencing token: strictly greater for every new owner of a key, so a stale owner (one whose
/// lease expired and was taken over) can be told apart and refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(pub u64);

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
}
