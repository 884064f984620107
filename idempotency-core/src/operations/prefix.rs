//! Storage keys by a prefix of their hex, as operators shorten them.

use super::{Cursor, Operations, Query};
use crate::{Record, StoreError};

/// The records among every record (a full scan) whose key's hex starts with `hex`, at most
/// `limit`.
pub(crate) async fn by_scan<O: Operations + ?Sized>(
    store: &O,
    hex: &str,
    limit: usize,
) -> Result<Vec<Record>, StoreError> {
    let query = Query::all();
    let mut cursor = Cursor::start();
    let mut found = Vec::new();
    loop {
        let page = store.page(&query, &cursor, super::DEFAULT_BATCH).await?;
        found.extend(
            page.records
                .into_iter()
                .filter(|record| record.key.to_hex().starts_with(hex)),
        );
        match page.next {
            Some(next) if found.len() < limit => cursor = next,
            _ => break,
        }
    }
    found.truncate(limit);
    Ok(found)
}
