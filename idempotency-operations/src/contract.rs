//! The [`Operations`] contract a store implements, and the audited step it takes.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::{Archive, AuditEntry, AuditLog, Counts, Cursor, Page, Purged, Query, purgeable};
use idempotency_core::{
    BoxFuture, DynStore, FencingToken, Outcome, Record, StorageKey, StoreError,
};

/// What [`Operations::page`] is asked to read: the records that match `query` among at most
/// about `batch` examined from `cursor`.
#[derive(Clone, Copy, Debug)]
pub struct PageRequest<'a> {
    /// Which records are wanted.
    pub query: &'a Query,
    /// Where the scan goes on ([`Cursor::start`] first).
    pub cursor: &'a Cursor,
    /// About how many records to examine.
    pub batch: usize,
}

/// What [`Operations::purge_page`] is asked to purge: one batch of expired records of
/// `namespace` (every namespace: `None`) from `cursor`, copied to `archive` first.
pub struct PurgeRequest<'a> {
    /// The namespace purged, or all.
    pub namespace: Option<&'a str>,
    /// Where the scan goes on ([`Cursor::start`] first).
    pub cursor: &'a Cursor,
    /// About how many records to examine.
    pub batch: usize,
    /// Where each record is copied before it is deleted.
    pub archive: &'a mut Archive,
}

/// What a store brings to operations, beyond [`Store`](idempotency_core::Store) (whose `get`, `release`
/// and `complete` the fenced actions use): object-safe, so a store chosen at run time (the
/// command line's `--store URL`) is one `Arc<dyn Operations>`.
pub trait Operations: DynStore {
    /// One bounded batch of a scan from `cursor`: the records among at most about `batch`
    /// examined that match `query`. Stores filter what they can before reading records (SQL:
    /// namespace, state, times; Redis keys carry no namespace, so every record is read).
    fn page<'a>(&'a self, request: PageRequest<'a>) -> BoxFuture<'a, Result<Page, StoreError>>;

    /// Deletes the record of `key` if its fencing token is still `token`, in any state;
    /// whether it did.
    fn delete_fenced<'a>(
        &'a self,
        key: &'a StorageKey,
        token: FencingToken,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// How long after its lease ended an abandoned record is kept ([`purgeable`](super::purgeable)).
    fn abandoned_grace(&self) -> Duration;

    /// The records whose storage key, in lowercase hex, starts with `hex` (at most `limit`):
    /// how a shortened id as an operator copies it from a listing is resolved. The default
    /// scans every record; the SQL stores read a range of their primary key, Redis matches
    /// its keys by pattern.
    fn by_key_prefix<'a>(
        &'a self,
        hex: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<idempotency_core::Record>, StoreError>> {
        Box::pin(records_by_prefix(self, hex, limit))
    }

    /// Where the records are, in an operator's words (`table idempotency_records`, `keys
    /// under idempotency:`): what a scan that found nothing says it scanned.
    fn source(&self) -> String {
        "records".to_owned()
    }

    /// Checks that the records are where the store points, so that a scan finding nothing
    /// means no record rather than a wrong table: a SQL store's record table exists and has
    /// the record columns ([`StoreError::Config`] naming it otherwise). The default: nothing
    /// to check.
    fn check_source(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    /// The counts of `query` when the store can count without reading every record (the SQL
    /// stores, through their index, for queries by namespace and last write); `None`, the
    /// default: [`Admin::count`](super::Admin::count) scans.
    fn count_fast<'a>(
        &'a self,
        query: &'a Query,
    ) -> BoxFuture<'a, Result<Option<Counts>, StoreError>> {
        let _ = query;
        Box::pin(std::future::ready(Ok(None)))
    }

    /// The TTL the records' table is configured with, if any: no purge deletes a record last
    /// written less than this long ago (SQL stores, `idempotency_sql::SqlStore::with_table_ttl`).
    /// `None`, the default: records go when their own expiry says.
    fn ttl_floor(&self) -> BoxFuture<'_, Result<Option<Duration>, StoreError>> {
        Box::pin(std::future::ready(Ok(None)))
    }

    /// Purges one batch of expired records ([`purgeable`](super::purgeable)) from `cursor`,
    /// copying them to `archive` first. The default, for stores without an expiring delete
    /// (memory, Redis): a scan, then a fenced delete of each expired record, so a record
    /// renewed or taken over since the scan read it keeps its new token and stays; JSON lines
    /// archives only. The SQL stores delete a batch in one statement, archiving to a table too.
    fn purge_page<'a>(
        &'a self,
        request: PurgeRequest<'a>,
    ) -> BoxFuture<'a, Result<Purged, StoreError>> {
        Box::pin(purge_by_scan(self, request))
    }

    /// Applies `act`'s step and writes its audit entry in one transaction, so that an action
    /// is never applied without its audit row: where the audit log is a table in this store's
    /// own database ([`AuditLog::table_in`]; the SQL stores). Whether it applied (a stale
    /// token: `false`); an error leaves both undone. `None`, the default: the store cannot,
    /// and the caller acts, then audits.
    fn act_audited<'a>(
        &'a self,
        act: AuditedStep<'a>,
    ) -> Option<BoxFuture<'a, Result<bool, StoreError>>> {
        let _ = act;
        None
    }
}

/// A fenced step with the audit entry it commits with ([`Operations::act_audited`]).
#[derive(Clone, Copy)]
pub struct AuditedStep<'a> {
    /// The record's key.
    pub key: &'a StorageKey,
    /// The step applies only while the record's fencing token is this one.
    pub token: FencingToken,
    /// What to do.
    pub step: Step<'a>,
    /// Where the entry goes.
    pub audit: &'a dyn AuditLog,
    /// The entry, given whether the step applied.
    pub entry: &'a (dyn Fn(bool) -> AuditEntry + Send + Sync),
}

impl std::fmt::Debug for AuditedStep<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditedStep")
            .field("key", self.key)
            .field("token", &self.token)
            .field("step", &self.step)
            .finish_non_exhaustive()
    }
}

/// The step of a fenced operator action on one record, as the store applies it.
#[derive(Clone, Copy, Debug)]
pub enum Step<'a> {
    /// Release the in-progress record.
    Release,
    /// Complete the in-progress record with this outcome, kept this long.
    Complete(&'a Outcome, Duration),
    /// Delete the record, in any state.
    Delete,
    /// End the in-progress record's lease now, so that the next claim (a retry, the completer
    /// of a run with steps) takes it over; where the store keeps a run's checkpoints, they stay,
    /// and its attempts start again from 1.
    Resume,
}

impl<O: Operations + idempotency_core::Store> Operations for Arc<O> {
    fn page<'a>(&'a self, request: PageRequest<'a>) -> BoxFuture<'a, Result<Page, StoreError>> {
        (**self).page(request)
    }

    fn delete_fenced<'a>(
        &'a self,
        key: &'a StorageKey,
        token: FencingToken,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        (**self).delete_fenced(key, token)
    }

    fn abandoned_grace(&self) -> Duration {
        (**self).abandoned_grace()
    }

    fn by_key_prefix<'a>(
        &'a self,
        hex: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<idempotency_core::Record>, StoreError>> {
        (**self).by_key_prefix(hex, limit)
    }

    fn source(&self) -> String {
        (**self).source()
    }

    fn check_source(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        (**self).check_source()
    }

    fn count_fast<'a>(
        &'a self,
        query: &'a Query,
    ) -> BoxFuture<'a, Result<Option<Counts>, StoreError>> {
        (**self).count_fast(query)
    }

    fn ttl_floor(&self) -> BoxFuture<'_, Result<Option<Duration>, StoreError>> {
        (**self).ttl_floor()
    }

    fn purge_page<'a>(
        &'a self,
        request: PurgeRequest<'a>,
    ) -> BoxFuture<'a, Result<Purged, StoreError>> {
        (**self).purge_page(request)
    }

    fn act_audited<'a>(
        &'a self,
        act: AuditedStep<'a>,
    ) -> Option<BoxFuture<'a, Result<bool, StoreError>>> {
        (**self).act_audited(act)
    }
}

/// Records examined per batch unless set otherwise ([`Admin::with_batch`](super::Admin::with_batch)).
pub const DEFAULT_BATCH: usize = 500;

/// The default [`Operations::by_key_prefix`]: storage keys by a prefix of their hex, as operators
/// shorten them.
/// The records among every record (a full scan) whose key's hex starts with `hex`, at most
/// `limit`.
async fn records_by_prefix<O: Operations + ?Sized>(
    store: &O,
    hex: &str,
    limit: usize,
) -> Result<Vec<Record>, StoreError> {
    let query = Query::all();
    let mut cursor = Cursor::start();
    let mut found = Vec::new();
    loop {
        let page = store
            .page(PageRequest {
                query: &query,
                cursor: &cursor,
                batch: DEFAULT_BATCH,
            })
            .await?;
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

/// The purge of one batch by a scan and a fenced delete of each expired record
/// ([`Operations::purge_page`]'s default).
pub(crate) async fn purge_by_scan<O: Operations + ?Sized>(
    store: &O,
    request: PurgeRequest<'_>,
) -> Result<Purged, StoreError> {
    let PurgeRequest {
        namespace,
        cursor,
        batch,
        archive,
    } = request;
    if let Archive::Table(_) = archive {
        return Err(StoreError::Config(
            "an archive table needs a SQL store; archive to JSON lines instead".to_owned(),
        ));
    }
    let query = Query {
        namespace: namespace.map(str::to_owned),
        ..Query::default()
    };
    let page = store
        .page(PageRequest {
            query: &query,
            cursor,
            batch,
        })
        .await?;
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
