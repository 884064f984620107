//! [`Operations`] on the memory store: a scan shard by shard, in batches of at most `batch`
//! records in storage-key order.

use std::time::{Duration, SystemTime};

use idempotency_core::{BoxFuture, FencingToken, MemoryStore, StorageKey, StoreError};

use crate::{Cursor, Operations, Page, PageRequest};

/// A batch is at most `batch` records of one of the memory store's shards, in storage-key order
/// ([`MemoryStore::scan_shard`]); the cursor names the shard and the last key taken.
impl Operations for MemoryStore {
    fn page<'a>(&'a self, request: PageRequest<'a>) -> BoxFuture<'a, Result<Page, StoreError>> {
        let (query, cursor, batch) = (request.query, request.cursor, request.batch);
        let page = parse_cursor(cursor).map(|(index, after)| {
            let now = SystemTime::now();
            let (taken, more) = self.scan_shard(index, after, batch);
            let next = match taken.last() {
                Some(last) if more => {
                    Some(Cursor::from_text(format!("{index}:{}", last.key.to_hex())))
                }
                _ => (index + 1 < MemoryStore::SHARDS)
                    .then(|| Cursor::from_text((index + 1).to_string())),
            };
            Page {
                examined: taken.len() as u64,
                records: taken
                    .into_iter()
                    .filter(|record| query.matches(record, now))
                    .collect(),
                next,
            }
        });
        Box::pin(std::future::ready(page))
    }

    fn delete_fenced<'a>(
        &'a self,
        key: &'a StorageKey,
        token: FencingToken,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(std::future::ready(Ok(MemoryStore::delete_fenced(
            self, key, token,
        ))))
    }

    fn abandoned_grace(&self) -> Duration {
        MemoryStore::abandoned_grace(self)
    }
}

/// The shard a cursor names and the last key taken from it (`<shard>` or `<shard>:<key hex>`;
/// the start: shard 0, from its first key).
fn parse_cursor(cursor: &Cursor) -> Result<(usize, Option<StorageKey>), StoreError> {
    if cursor.is_start() {
        return Ok((0, None));
    }
    let text = cursor.as_str();
    let (shard, after) = match text.split_once(':') {
        Some((shard, hex)) => (shard, Some(StorageKey::from_hex(hex))),
        None => (text, None),
    };
    let bad = || StoreError::Config(format!("not a memory store cursor: {cursor}"));
    let index = shard
        .parse::<usize>()
        .ok()
        .filter(|index| *index < MemoryStore::SHARDS)
        .ok_or_else(bad)?;
    match after {
        None => Ok((index, None)),
        Some(Some(key)) => Ok((index, Some(key))),
        Some(None) => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_name_a_shard_and_the_last_key_taken() {
        let key = StorageKey([7; 32]);
        assert_eq!(parse_cursor(&Cursor::start()).ok(), Some((0, None)));
        assert_eq!(parse_cursor(&Cursor::from_text("5")).ok(), Some((5, None)));
        let text = format!("5:{}", key.to_hex());
        assert_eq!(
            parse_cursor(&Cursor::from_text(text)).ok(),
            Some((5, Some(key)))
        );
        for bad in ["64", "x", "5:zz", "-1:"] {
            assert!(parse_cursor(&Cursor::from_text(bad)).is_err(), "{bad}");
        }
    }
}
