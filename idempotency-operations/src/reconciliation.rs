//! Reconciliation as operators read it: each raw key's record under each front end, or its
//! absence. The CLI and the admin API print the same lines.

use std::time::SystemTime;

use idempotency_core::{Record, StorageKey};
use serde::Serialize;

use crate::RecordView;

/// One line of a reconciliation: the state, attempts and outcome status of one record a raw
/// key has under one front end, or `absent` where it has none. Never the raw key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Reconciliation {
    /// The storage key, 64 hex characters (on an `absent` line, the key looked for).
    pub key_hash: String,
    /// The record's [`Status`](crate::Status) (`in_progress`, `abandoned`, `completed`), or
    /// `absent`.
    pub state: &'static str,
    /// The name of the front end whose record it is, where known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mechanism: Option<&'static str>,
    /// How many owners claimed the key; none on an `absent` line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// The stored outcome's status, once completed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome_status: Option<u16>,
}

impl Reconciliation {
    /// The line of `record`, written by the front end named `mechanism`.
    pub fn found(record: &Record, mechanism: Option<&'static str>, now: SystemTime) -> Self {
        let view = RecordView::of(record, now);
        Self {
            key_hash: view.key_hash,
            state: view.state.as_str(),
            mechanism,
            attempts: Some(view.attempts),
            outcome_status: view.outcome_status,
        }
    }

    /// The line of a key with no record, `key_hash` being what was looked for.
    pub fn absent(key_hash: String) -> Self {
        Self {
            key_hash,
            state: "absent",
            mechanism: None,
            attempts: None,
            outcome_status: None,
        }
    }

    /// The lines of one raw key from its candidates, in order (each front end's name, the
    /// storage key the raw key has under it, and its record there, if any): one per record
    /// found; when none is, one `absent` line under the first candidate's storage key.
    pub fn of_key<'r>(
        candidates: impl IntoIterator<Item = (&'static str, StorageKey, Option<&'r Record>)>,
        now: SystemTime,
    ) -> Vec<Self> {
        let mut first = None;
        let mut lines = Vec::new();
        for (mechanism, key, record) in candidates {
            first.get_or_insert(key);
            if let Some(record) = record {
                lines.push(Self::found(record, Some(mechanism), now));
            }
        }
        if lines.is_empty() {
            let key_hash = first.map(|key| key.to_hex()).unwrap_or_default();
            lines.push(Self::absent(key_hash));
        }
        lines
    }
}
