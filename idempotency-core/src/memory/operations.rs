//! [`Operations`] on the memory store: a scan shard by shard.

use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use super::{MemoryStore, SHARDS};
use crate::operations::{Archive, Cursor, Operations, Page, Purged, Query, purge_by_scan};
use crate::{BoxFuture, FencingToken, StorageKey, StoreError};

/// A batch is one of the 64 shards (its lock is held while its matching records are copied),
/// whatever `batch` asks: the store is in this process, so a batch costs no round trip.
impl Operations for MemoryStore {
    fn page<'a>(
        &'a self,
        query: &'a Query,
        cursor: &'a Cursor,
        _batch: usize,
    ) -> BoxFuture<'a, Result<Page, StoreError>> {
        let page = shard_of_cursor(cursor).map(|index| {
            let now = SystemTime::now();
            let shard = self.records.lock_index(index);
            let records = shard
                .map
                .iter()
                .map(|slot| slot.keyed.value.to_record(slot.keyed.key))
                .filter(|record| query.matches(record, now))
                .collect();
            Page {
                records,
                examined: shard.len() as u64,
                next: (index + 1 < SHARDS).then(|| Cursor::from_text((index + 1).to_string())),
            }
        });
        Box::pin(std::future::ready(page))
    }

    fn delete_fenced<'a>(
        &'a self,
        key: &'a StorageKey,
        token: FencingToken,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let mut shard = self.records.lock(key);
        let deleted = shard.get(key).is_some_and(|entry| entry.token == token);
        if deleted {
            shard.remove(key);
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
        Box::pin(std::future::ready(Ok(deleted)))
    }

    fn abandoned_grace(&self) -> Duration {
        self.abandoned_grace
    }

    fn purge_page<'a>(
        &'a self,
        namespace: Option<&'a str>,
        cursor: &'a Cursor,
        batch: usize,
        archive: &'a mut Archive,
    ) -> BoxFuture<'a, Result<Purged, StoreError>> {
        Box::pin(purge_by_scan(self, namespace, cursor, batch, archive))
    }
}

/// The shard a cursor names (the start: shard 0).
fn shard_of_cursor(cursor: &Cursor) -> Result<usize, StoreError> {
    if cursor.is_start() {
        return Ok(0);
    }
    cursor
        .as_str()
        .parse::<usize>()
        .ok()
        .filter(|index| *index < SHARDS)
        .ok_or_else(|| StoreError::Config(format!("not a memory store cursor: {cursor}")))
}
