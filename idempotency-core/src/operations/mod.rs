//! Operations on records: find and resolve dangling records, reconcile, purge with archive.
//!
//! A crash between a claim and its completion leaves an **abandoned** record: in progress,
//! its lease ended ([`Status::Abandoned`]). The next claim of its key takes it over, but until
//! a retry comes every duplicate waits on it, and finance may ask whether it was processed.
//! This module lets an operator see such records and decide about them, on every store:
//!
//! - [`Operations`]: what a store brings, implemented by the memory store, `RedisStore` (one
//!   node: `SCAN`; Cluster: `SCAN` on every master in turn) and the SQL stores (pages by
//!   storage key): a scan in bounded batches, a delete fenced by the fencing token, and a
//!   purge of one batch with its [`Archive`].
//! - [`Admin`]: the operations themselves over any such store: list and count by [`Query`]
//!   (namespace, [`Status`], last update, attempts, conflicts: the records a conflicting
//!   duplicate met, [`Store::mark_conflict`](crate::Store::mark_conflict)), inspect one record, reconcile a list of
//!   keys, and the operator's actions, each **fenced** ([`Fence`]: applied only to the record
//!   as it was listed, refused when it moved on) and **audited** ([`AuditLog`]: who, why,
//!   when, the record as it was): release, complete by hand, delete, purge.
//!
//! Records are shown as [`RecordView`]s: storage keys (digests), never raw keys, and a stored
//! body only when one record is asked for by its key. A raw key becomes a storage key exactly
//! as the service derived it: by its [`Scope`](crate::Scope) (namespace, principal) and
//! [`Mechanism`](crate::Mechanism) ([`Admin::storage_key`]).
//!
//! ```
//! use idempotency_core::operations::{Actor, Admin, Fence, Query, TracingAudit};
//! use idempotency_core::{Fingerprint, Idempotency, IdempotencyKey, MemoryStore, Mechanism, Scope};
//! use std::sync::Arc;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), idempotency_core::Error> {
//! let store = Arc::new(MemoryStore::new());
//! let admin = Admin::new(Arc::clone(&store), TracingAudit);
//! let key = Admin::storage_key(&Scope::new("payments.callback"), Mechanism::Request, "T1");
//! // ... a record of "T1" dangles after a crash ...
//! # let engine = Idempotency::new(Arc::clone(&store));
//! # let scope = Scope::new("payments.callback");
//! # let _claimed = engine.begin(&scope, &IdempotencyKey::parse("T1")?, &Fingerprint::of_bytes(b"x")).await?;
//! let stuck = admin.list(&Query::stuck(Some(std::time::Duration::ZERO)), 100, &mut |_| {}).await?;
//! for record in &stuck {
//!     let acted = admin.release(&record.key, Fence::of(record), &Actor::new("ops", "INC-42")).await?;
//!     assert!(acted.applied());
//! }
//! assert!(admin.inspect(&key).await?.is_none());
//! # Ok(()) }
//! ```

mod admin;
mod archive;
mod audit;
mod cursor;
mod fence;
pub(crate) mod prefix;
mod query;
mod status;
mod tiers;
mod view;

pub use admin::{Admin, DEFAULT_BATCH, Progress, PurgeReport};
pub use archive::{Archive, Purged, purge_by_scan, purgeable};
pub use audit::{AUDIT_TARGET, Action, Actor, AuditEntry, AuditLog, TracingAudit};
pub use cursor::{Cursor, Page};
pub use fence::{Acted, Fence, FenceRefusal};
pub use query::Query;
pub use status::Status;
pub use tiers::{Tier, TieredStuck};
pub use view::{Counts, RecordView};

use std::sync::Arc;
use std::time::Duration;

use crate::{BoxFuture, DynStore, FencingToken, Outcome, StorageKey, StoreError};

/// What a store brings to operations, beyond [`Store`](crate::Store) (whose `get`, `release`
/// and `complete` the fenced actions use): object-safe, so a store chosen at run time (the
/// command line's `--store URL`) is one `Arc<dyn Operations>`.
pub trait Operations: DynStore {
    /// One bounded batch of a scan from `cursor`: the records among at most about `batch`
    /// examined that match `query`. Stores filter what they can before reading records (SQL:
    /// namespace, state, times; Redis keys carry no namespace, so every record is read).
    fn page<'a>(
        &'a self,
        query: &'a Query,
        cursor: &'a Cursor,
        batch: usize,
    ) -> BoxFuture<'a, Result<Page, StoreError>>;

    /// Deletes the record of `key` if its fencing token is still `token`, in any state;
    /// whether it did.
    fn delete_fenced<'a>(
        &'a self,
        key: &'a StorageKey,
        token: FencingToken,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// How long after its lease ended an abandoned record is kept ([`purgeable`]).
    fn abandoned_grace(&self) -> Duration;

    /// The records whose storage key, in lowercase hex, starts with `hex` (at most `limit`):
    /// how a shortened id as an operator copies it from a listing is resolved. The default
    /// scans every record; the SQL stores read a range of their primary key, Redis matches
    /// its keys by pattern.
    fn by_key_prefix<'a>(
        &'a self,
        hex: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<crate::Record>, StoreError>> {
        Box::pin(prefix::by_scan(self, hex, limit))
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
    /// default: [`Admin::count`] scans.
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

    /// Purges one batch of expired records ([`purgeable`]) from `cursor`, copying them to
    /// `archive` first.
    fn purge_page<'a>(
        &'a self,
        namespace: Option<&'a str>,
        cursor: &'a Cursor,
        batch: usize,
        archive: &'a mut Archive,
    ) -> BoxFuture<'a, Result<Purged, StoreError>>;

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
}

impl<O: Operations + crate::Store> Operations for Arc<O> {
    fn page<'a>(
        &'a self,
        query: &'a Query,
        cursor: &'a Cursor,
        batch: usize,
    ) -> BoxFuture<'a, Result<Page, StoreError>> {
        (**self).page(query, cursor, batch)
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
    ) -> BoxFuture<'a, Result<Vec<crate::Record>, StoreError>> {
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
        namespace: Option<&'a str>,
        cursor: &'a Cursor,
        batch: usize,
        archive: &'a mut Archive,
    ) -> BoxFuture<'a, Result<Purged, StoreError>> {
        (**self).purge_page(namespace, cursor, batch, archive)
    }

    fn act_audited<'a>(
        &'a self,
        act: AuditedStep<'a>,
    ) -> Option<BoxFuture<'a, Result<bool, StoreError>>> {
        (**self).act_audited(act)
    }
}
