//! Purge with archive: where purged records go, and the purge of stores without a bulk path.

use std::io::Write;
use std::time::{Duration, SystemTime};

use super::{Cursor, RecordView};
use idempotency_core::{Record, RecordState, StoreError};

/// Where a purge copies each record (or sent outbox message) before deleting it. Archives hold
/// stored bodies and message payloads, which may be personal data: an archive is opt-in ([`Archive::None`] deletes without a copy, as the
/// sweeper does), and its retention is the operator's to decide.
pub enum Archive {
    /// No copy.
    None,
    /// One JSON object per line ([`RecordView`] with body and fingerprint, or an outbox's
    /// `idempotency_outbox::table::ArchivedMessage`), written and
    /// flushed before the batch is deleted: a purge stopped between the two writes the batch
    /// again when resumed (at least once).
    JsonLines(Box<dyn Write + Send>),
    /// A table in the same database (SQL stores only), created on first use with the record
    /// (or outbox) table's columns and `archived_at`; the copy and the delete of a batch commit
    /// together.
    Table(String),
}

impl std::fmt::Debug for Archive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::None => f.write_str("Archive::None"),
            Self::JsonLines(_) => f.write_str("Archive::JsonLines"),
            Self::Table(table) => write!(f, "Archive::Table({table})"),
        }
    }
}

impl Archive {
    /// Writes `records` as JSON lines (nothing for the other archives) and flushes them.
    pub(crate) fn write_lines(
        &mut self,
        records: &[Record],
        now: SystemTime,
    ) -> Result<(), StoreError> {
        let views: Vec<RecordView> = records
            .iter()
            .map(|record| RecordView::of(record, now).with_body(record))
            .collect();
        self.write_json_lines(&views)
    }

    /// Writes `items` as JSON lines (nothing for the other archives) and flushes them.
    pub(crate) fn write_json_lines<T: serde::Serialize>(
        &mut self,
        items: &[T],
    ) -> Result<(), StoreError> {
        let Self::JsonLines(out) = self else {
            return Ok(());
        };
        let io = |error: std::io::Error| StoreError::Backend(format!("archive: {error}").into());
        for item in items {
            let line = serde_json::to_string(item)
                .map_err(|error| StoreError::Codec(error.to_string().into()))?;
            out.write_all(line.as_bytes()).map_err(io)?;
            out.write_all(b"\n").map_err(io)?;
        }
        out.flush().map_err(io)
    }
}

/// One purged batch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Purged {
    /// Records deleted (and archived).
    pub purged: u64,
    /// Records examined.
    pub examined: u64,
    /// Where the next batch starts; `None` at the end.
    pub next: Option<Cursor>,
}

/// Whether `record` is expired at `now` (what a purge deletes, as the stores' own
/// `purge_expired`): completed past its TTL, or in progress with its lease ended more than
/// `grace` ago.
pub fn purgeable(record: &Record, now: SystemTime, grace: Duration) -> bool {
    match record.state {
        RecordState::Completed => record.expires_at <= now,
        RecordState::InProgress => record.expires_at + grace <= now,
    }
}
