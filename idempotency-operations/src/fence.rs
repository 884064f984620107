//! Fencing an operator's action to the record as it was listed.

use std::time::SystemTime;

use crate::time::unix_millis;
use idempotency_core::{FencingToken, Record};

/// The record an operator decided about, as it was listed: its fencing token and when it
/// was last written. An action applies only while the record is still exactly that one.
///
/// The token alone names the owner (a takeover or a new claim changes it); `updated_at` also
/// tells a renewed lease (the owner's keep-alive ran since) or a completion apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fence {
    /// The record's fencing token when it was listed.
    pub token: FencingToken,
    /// When it had last been written.
    pub updated_at: SystemTime,
}

impl Fence {
    /// The fence of `record` as it is now.
    pub fn of(record: &Record) -> Self {
        Self {
            token: record.token,
            updated_at: record.updated_at,
        }
    }

    /// Whether `record` is still the one this fence was taken of: the same token, last
    /// written in the same millisecond (listings show milliseconds; a store may keep finer).
    pub fn holds(&self, record: &Record) -> bool {
        record.token == self.token && unix_millis(record.updated_at) == unix_millis(self.updated_at)
    }
}

/// Why an operator's action changed nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FenceRefusal {
    /// The key has no record (released, completed and expired, or never claimed).
    Absent,
    /// The record moved on since it was listed: taken over, renewed, completed or replaced.
    MovedOn,
    /// The action needs an in-progress record and this one is completed.
    NotInProgress,
}

impl FenceRefusal {
    /// `"absent"`, `"moved_on"` or `"not_in_progress"`, as JSON and the audit write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Absent => "absent",
            Self::MovedOn => "moved_on",
            Self::NotInProgress => "not_in_progress",
        }
    }
}

/// What an operator's fenced action did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Acted {
    /// The record was the one fenced, and the action applied to it.
    Applied,
    /// Nothing changed; `current` is the record as it is now (if any).
    Refused {
        /// Why.
        refusal: FenceRefusal,
        /// The record now.
        current: Option<Box<Record>>,
    },
}

impl Acted {
    /// Whether the action applied.
    pub fn applied(&self) -> bool {
        matches!(self, Self::Applied)
    }
}
