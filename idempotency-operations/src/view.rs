//! Records and counts as operations show them (JSON, tables): never a raw key, a body only
//! when asked for.

use std::time::SystemTime;

use base64::Engine;
use serde::{Deserialize, Serialize};

use super::Status;
use crate::time::unix_millis;
use idempotency_core::Record;
use idempotency_core::metrics::{OLDEST_ABANDONED, RECORDS};

/// One record as operations show it: its storage key (a digest, never the raw key), status,
/// attempts and times; the stored outcome's body only when asked for ([`RecordView::with_body`]),
/// since bodies may hold personal data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordView {
    /// The storage key, 64 hex characters.
    pub key_hash: String,
    /// The namespace.
    pub namespace: String,
    /// In progress, abandoned or completed.
    pub state: Status,
    /// How many owners claimed the key.
    pub attempts: u32,
    /// Milliseconds since the record was last written (what `--older-than` compares).
    pub age_ms: u64,
    /// The current owner's fencing token: the fence of an action on this record.
    pub token: u64,
    /// When the record was created, Unix milliseconds.
    pub created_at_ms: u64,
    /// When it was last written, Unix milliseconds (with `token`, the fence).
    pub updated_at_ms: u64,
    /// In progress: when the lease ends; completed: when the record expires (Unix ms).
    pub expires_at_ms: u64,
    /// When it was completed, if it was (Unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at_ms: Option<u64>,
    /// The stored outcome's status, once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome_status: Option<u16>,
    /// How many conflicting duplicates (the key again with another payload) met the record:
    /// not 0, a record to reconcile.
    #[serde(default)]
    pub conflicts: u32,
    /// When the last conflicting duplicate came, if one did (Unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_conflict_at_ms: Option<u64>,
    /// The stored outcome's body, base64 (only when asked for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<String>,
    /// The step a run with steps stopped at: the step that ended it, else its last completed
    /// step (`idempotency_core::Progress::stopped_at`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// The fingerprint, hex (only with the body).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
}

impl RecordView {
    /// The view of `record` at `now`, without its body.
    pub fn of(record: &Record, now: SystemTime) -> Self {
        Self {
            key_hash: record.key.to_hex(),
            namespace: record.namespace.clone(),
            state: Status::of(record, now),
            attempts: record.attempts,
            age_ms: now
                .duration_since(record.updated_at)
                .map(|age| u64::try_from(age.as_millis()).unwrap_or(u64::MAX))
                .unwrap_or(0),
            token: record.token.get(),
            created_at_ms: unix_millis(record.created_at),
            updated_at_ms: unix_millis(record.updated_at),
            expires_at_ms: unix_millis(record.expires_at),
            completed_at_ms: record.completed_at.map(unix_millis),
            outcome_status: record.outcome.as_ref().map(|outcome| outcome.status),
            conflicts: record.conflicts,
            last_conflict_at_ms: record.last_conflict_at.map(unix_millis),
            body_base64: None,
            step: record
                .progress
                .as_ref()
                .and_then(|progress| progress.stopped_at().map(str::to_owned)),
            fingerprint: None,
        }
    }

    /// The same view with the stored body and the fingerprint: for one record asked for by
    /// its key, and for archives.
    pub fn with_body(mut self, record: &Record) -> Self {
        self.body_base64 = record
            .outcome
            .as_ref()
            .map(|outcome| base64::engine::general_purpose::STANDARD.encode(&outcome.body));
        self.fingerprint = Some(hex::encode(record.fingerprint.0));
        self
    }
}

/// Records per status (what `stats` and the reconciliation counts report).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// In progress under a live lease.
    pub in_progress: u64,
    /// In progress, the lease ended.
    pub abandoned: u64,
    /// Completed.
    pub completed: u64,
    /// How long ago the oldest abandoned record was last written, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_abandoned_ms: Option<u64>,
    /// How many records the scan examined (all namespaces, on stores that cannot filter by
    /// namespace before reading a record: Redis).
    pub examined: u64,
}

impl Counts {
    /// Counts `record` at `now`.
    pub fn add(&mut self, record: &Record, now: SystemTime) {
        match Status::of(record, now) {
            Status::InProgress => self.in_progress += 1,
            Status::Completed => self.completed += 1,
            Status::Abandoned => {
                self.abandoned += 1;
                let age = RecordView::of(record, now).age_ms;
                self.oldest_abandoned_ms = Some(self.oldest_abandoned_ms.unwrap_or(0).max(age));
            }
        }
    }

    /// All records counted.
    pub fn total(&self) -> u64 {
        self.in_progress + self.abandoned + self.completed
    }
}

impl Counts {
    /// Sets the gauges [`RECORDS`] and [`OLDEST_ABANDONED`] of `namespace` (`""` for every
    /// namespace) from these counts.
    pub(crate) fn publish(&self, namespace: &str) {
        for (state, count) in [
            ("in_progress", self.in_progress),
            ("abandoned", self.abandoned),
            ("completed", self.completed),
        ] {
            metrics::gauge!(RECORDS, "namespace" => namespace.to_owned(), "state" => state)
                .set(count as f64);
        }
        let oldest = self.oldest_abandoned_ms.unwrap_or(0) as f64 / 1000.0;
        metrics::gauge!(OLDEST_ABANDONED, "namespace" => namespace.to_owned()).set(oldest);
    }
}
