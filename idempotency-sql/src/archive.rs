//! Purged rows written to an [`Archive::JsonLines`] before their batch is deleted.

use std::time::SystemTime;

use idempotency_core::{Error, Record};
use idempotency_operations::{Archive, RecordView};

/// Writes `items` as JSON lines to `archive` if it is [`Archive::JsonLines`] (nothing for the
/// other archives), and flushes them: a batch is on disk before it is deleted.
pub fn write_json_lines<T: serde::Serialize>(
    archive: &mut Archive,
    items: &[T],
) -> Result<(), Error> {
    use std::io::Write as _;

    let Archive::JsonLines(out) = archive else {
        return Ok(());
    };
    let io = |error: std::io::Error| Error::Backend(format!("archive: {error}").into());
    for item in items {
        let line =
            serde_json::to_string(item).map_err(|error| Error::Codec(error.to_string().into()))?;
        out.write_all(line.as_bytes()).map_err(io)?;
        out.write_all(b"\n").map_err(io)?;
    }
    out.flush().map_err(io)
}

/// Writes purged `records` (with their bodies) as JSON lines, as [`write_json_lines`] does.
pub(crate) fn write_records(
    archive: &mut Archive,
    records: &[Record],
    now: SystemTime,
) -> Result<(), Error> {
    let views: Vec<RecordView> = records
        .iter()
        .map(|record| RecordView::of(record, now).with_body(record))
        .collect();
    write_json_lines(archive, &views)
}
