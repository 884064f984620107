//! Where a scan in bounded batches stands.

use idempotency_core::Record;

/// Where a scan continues: opaque text a store wrote (a Redis `SCAN` cursor per node, the
/// last storage key a SQL page ended at, a memory shard and the last key taken from it), printable so that a long scan or
/// purge can be resumed where it stopped.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Cursor(String);

impl Cursor {
    /// The start of a scan.
    pub fn start() -> Self {
        Self::default()
    }

    /// A cursor a store wrote, read back (from [`Cursor::as_str`]).
    pub fn from_text(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    /// The cursor as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is the start of a scan.
    pub fn is_start(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One bounded batch of a scan.
#[derive(Clone, Debug, Default)]
pub struct Page {
    /// The matching records of the batch (possibly none: a batch is bounded by the records
    /// it examined, not by those it found).
    pub records: Vec<Record>,
    /// How many records the batch examined.
    pub examined: u64,
    /// Where the next batch starts; `None` at the end of the scan.
    pub next: Option<Cursor>,
}
