//! The purge by scan, for stores without a native expiring delete.

use std::time::SystemTime;

use super::{Archive, Cursor, Operations, Purged, Query, purgeable};
use idempotency_core::{Record, StoreError};

/// The purge of one batch by a scan and a fenced delete of each expired record, for stores
/// without a native expiring delete (memory, Redis): a record renewed or taken over since the
/// scan read it keeps its new token and stays.
pub async fn purge_by_scan<O: Operations + ?Sized>(
    store: &O,
    namespace: Option<&str>,
    cursor: &Cursor,
    batch: usize,
    archive: &mut Archive,
) -> Result<Purged, StoreError> {
    if let Archive::Table(_) = archive {
        return Err(StoreError::Config(
            "an archive table needs a SQL store; archive to JSON lines instead".to_owned(),
        ));
    }
    let query = Query {
        namespace: namespace.map(str::to_owned),
        ..Query::default()
    };
    let page = store.page(&query, cursor, batch).await?;
    let now = SystemTime::now();
    let grace = store.abandoned_grace();
    let expired: Vec<Record> = page
        .records
        .into_iter()
        .filter(|record| purgeable(record, now, grace))
        .collect();
    archive.write_lines(&expired, now)?;
    let mut purged = 0;
    for record in &expired {
        if store.delete_fenced(&record.key, record.token).await? {
            purged += 1;
        }
    }
    Ok(Purged {
        purged,
        examined: page.examined,
        next: page.next,
    })
}
