//! What an operator sees of a record: in progress, abandoned or completed.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use idempotency_core::{Record, RecordState};

/// A record's status as operations report it: the stored state, with in-progress records
/// split by whether their lease has ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// In progress under a live lease: an owner is (or may be) running.
    InProgress,
    /// In progress, its lease ended: the owner crashed or hangs (a **dangling** record). The
    /// next claim takes it over; until then every duplicate of its key waits on it.
    Abandoned,
    /// Completed: its outcome is replayed to duplicates until it expires.
    Completed,
}

impl Status {
    /// The status of `record` at `now`.
    pub fn of(record: &Record, now: SystemTime) -> Self {
        match record.state {
            RecordState::Completed => Self::Completed,
            RecordState::InProgress if record.expires_at <= now => Self::Abandoned,
            RecordState::InProgress => Self::InProgress,
        }
    }

    /// `"in_progress"`, `"abandoned"` or `"completed"`: the names in JSON and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InProgress => "in_progress",
            Self::Abandoned => "abandoned",
            Self::Completed => "completed",
        }
    }

    /// Parses [`Status::as_str`]'s output.
    pub fn parse(text: &str) -> Option<Self> {
        [Self::InProgress, Self::Abandoned, Self::Completed]
            .into_iter()
            .find(|status| status.as_str() == text)
    }

    /// The state a store keeps for records of this status.
    pub fn stored_state(self) -> RecordState {
        match self {
            Self::InProgress | Self::Abandoned => RecordState::InProgress,
            Self::Completed => RecordState::Completed,
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
