//! [`Operations`] on the SQL stores: pages in storage-key order, filtered by the database
//! (namespace, state, `updated_at`), and purges that copy and delete a batch in one
//! transaction.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::ListFilter;
use super::TxStore;
use super::audit::database_of;
use super::common::{token_param, validate_identifier};
use super::dialect::sealed::{Clock, Order, PurgeBatch, PurgeSql};
use super::dialect::{Dialect, SqlStore};
use idempotency_core::{BoxFuture, FencingToken, Record, StorageKey, StoreError};
use idempotency_operations::{
    Archive, AuditedStep, Counts, Cursor, Operations, Page, PageRequest, PurgeRequest, Purged,
    Query, Step,
};

/// The storage key a SQL cursor names (the last key of the previous page).
fn after(cursor: &Cursor) -> Result<Option<StorageKey>, StoreError> {
    if cursor.is_start() {
        return Ok(None);
    }
    StorageKey::from_hex(cursor.as_str())
        .map(Some)
        .ok_or_else(|| StoreError::Config(format!("not a SQL store cursor: {cursor}")))
}

/// The cursor after a full page (`None` after a short one: the scan is done).
fn next(records: &[Record], batch: usize) -> Option<Cursor> {
    let last = records.last()?;
    (records.len() >= batch).then(|| Cursor::from_text(last.key.to_hex()))
}

impl<D: Dialect> SqlStore<D> {
    async fn page_op(
        &self,
        query: &Query,
        cursor: &Cursor,
        batch: usize,
    ) -> Result<Page, StoreError> {
        let filter = ListFilter {
            namespace: query.namespace.clone(),
            state: query.stored_state(),
            updated_from: query.updated_from,
            updated_before: query.updated_before,
            limit: batch,
        };
        let after = after(cursor)?;
        let records = self
            .records(&filter, Order::KeysAfter(after.as_ref()))
            .await?;
        let next = next(&records, batch);
        let examined = records.len() as u64;
        // Statuses (abandoned or live) by the clock the store's leases are judged by.
        let now = UNIX_EPOCH
            + Duration::from_micros(
                u64::try_from(D::now_micros(&self.pool, Clock::of::<D>()).await?).unwrap_or(0),
            );
        Ok(Page {
            records: records
                .into_iter()
                .filter(|record| query.matches(record, now))
                .collect(),
            examined,
            next,
        })
    }

    async fn check_table(&self) -> Result<(), StoreError> {
        let nothing = ListFilter {
            namespace: None,
            state: None,
            updated_from: None,
            updated_before: None,
            limit: 0,
        };
        let probe = self.records(&nothing, Order::KeysAfter(None)).await;
        match probe {
            Ok(_) => Ok(()),
            Err(error) if error.is_transient() && !matches!(error, StoreError::Backend(_)) => {
                Err(error)
            }
            Err(error) => Err(StoreError::Config(format!(
                "{} is not an idempotency record table here (it does not exist, or lacks \
                 the record columns): {error}",
                self.table_name()
            ))),
        }
    }

    async fn act_audited_op(&self, act: AuditedStep<'_>, table: &str) -> Result<bool, StoreError> {
        let AuditedStep {
            key,
            token,
            step,
            entry,
            ..
        } = act;
        let mut tx = self.begin().await?;
        let done = match step {
            Step::Release => self.release_on(&mut tx, key, token).await.map(|()| true),
            Step::Complete(outcome, ttl) => D::complete_on(self, &mut tx, key, token, outcome, ttl)
                .await
                .map(|()| true),
            Step::Delete => match token_param(token) {
                Ok(token) => Ok(D::fenced(&mut tx, &self.sql.delete, key, token).await? > 0),
                Err(_) => Ok(false),
            },
            Step::Resume => match token_param(token) {
                Ok(token) => Ok(D::fenced(&mut tx, &self.sql.resume, key, token).await? > 0),
                Err(_) => Ok(false),
            },
        };
        let applied = match done {
            Ok(applied) => applied,
            Err(StoreError::LeaseLost) => false,
            Err(error) => return Err(error),
        };
        let entry = entry(applied);
        let (open, close) = D::QUOTE;
        D::write_audit(&mut tx, &format!("{open}{table}{close}"), &entry)
            .await
            .map_err(|error| {
                StoreError::Backend(
                    format!(
                        "{} not applied: its audit entry could not be written: {error}",
                        entry.action.as_str()
                    )
                    .into(),
                )
            })?;
        tx.commit().await.map_err(crate::common::map_err)?;
        Ok(applied)
    }

    async fn delete_op(&self, key: &StorageKey, token: FencingToken) -> Result<bool, StoreError> {
        let Ok(token) = token_param(token) else {
            return Ok(false);
        };
        let mut conn = self.pool.acquire().await.map_err(crate::common::map_err)?;
        Ok(D::fenced(&mut conn, &self.sql.delete, key, token).await? > 0)
    }

    async fn purge_op(&self, request: PurgeRequest<'_>) -> Result<Purged, StoreError> {
        let (cursor, batch, archive) = (request.cursor, request.batch, request.archive);
        let (open, close) = D::QUOTE;
        let table = self.table_name();
        if let Archive::Table(name) = archive {
            validate_identifier(name)?;
            if cursor.is_start() {
                let create = format!(
                    "CREATE TABLE IF NOT EXISTS {open}{name}{close} AS SELECT r.*, {} AS \
                     archived_at FROM {open}{table}{close} r WHERE 1 = 0",
                    D::NOW
                );
                D::run(&self.pool, &create).await?;
            }
        }
        let after = after(cursor)?;
        let sql = PurgeSql {
            select: &self.sql.select_records,
            table,
            quote: D::QUOTE,
            lock: D::LOCK_ROWS,
            now: D::NOW,
            begin: D::BEGIN,
            clock: Clock::of::<D>(),
        };
        let batch_of = PurgeBatch {
            namespace: request.namespace,
            after: after.as_ref(),
            limit: batch,
            now: SystemTime::now(),
            grace: self.settings.abandoned_grace,
            floor: self.floor().await?,
        };
        let (records, purged) = D::purge_batch(&self.pool, sql, batch_of, archive).await?;
        Ok(Purged {
            purged,
            examined: records.len() as u64,
            next: next(&records, batch),
        })
    }
}

/// Pages of at most `batch` rows in storage-key order (the primary key), so a scan resumes
/// after the last key it saw; a purge batch selects its expired rows (`FOR UPDATE SKIP
/// LOCKED` on PostgreSQL and MySQL, SQLite's write lock), copies them to the archive and
/// deletes those still expired, in one transaction: live traffic's rows are skipped, never
/// deleted. Expiry, leases and ages are judged by the database's clock on PostgreSQL and MySQL
/// (as the stores' own leases and TTLs), by the host clock on SQLite (as its store).
impl<D: Dialect> Operations for SqlStore<D> {
    fn page<'a>(&'a self, request: PageRequest<'a>) -> BoxFuture<'a, Result<Page, StoreError>> {
        let (query, cursor, batch) = (request.query, request.cursor, request.batch);
        Box::pin(self.page_op(query, cursor, batch))
    }

    fn delete_fenced<'a>(
        &'a self,
        key: &'a StorageKey,
        token: FencingToken,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.delete_op(key, token))
    }

    fn abandoned_grace(&self) -> Duration {
        self.settings.abandoned_grace
    }

    /// The rows after the key just below the prefix, in key order: the first `limit` of
    /// them that have it.
    fn by_key_prefix<'a>(
        &'a self,
        hex: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Record>, StoreError>> {
        Box::pin(async move {
            let filter = ListFilter {
                namespace: None,
                state: None,
                updated_from: None,
                updated_before: None,
                limit,
            };
            let below = crate::prefix::below(hex);
            let records = self
                .records(&filter, Order::KeysAfter(below.as_ref()))
                .await?;
            Ok(records
                .into_iter()
                .filter(|record| record.key.to_hex().starts_with(hex))
                .collect())
        })
    }

    fn source(&self) -> String {
        format!("table {}", self.table_name())
    }

    /// Reads no row of the record table with the columns a scan reads: the database refuses
    /// a table that does not exist or is not a record table.
    fn check_source(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.check_table())
    }

    /// Three `COUNT(*)`s (completed; in progress with a live lease; abandoned, with the oldest
    /// last write) for queries by namespace and last write only.
    fn count_fast<'a>(
        &'a self,
        query: &'a Query,
    ) -> BoxFuture<'a, Result<Option<Counts>, StoreError>> {
        Box::pin(async move {
            if !query.statuses.is_empty()
                || query.in_progress_before.is_some()
                || query.min_attempts.is_some()
                || query.min_conflicts.is_some()
            {
                return Ok(None);
            }
            let filter = ListFilter {
                namespace: query.namespace.clone(),
                state: None,
                updated_from: query.updated_from,
                updated_before: query.updated_before,
                limit: 0,
            };
            let (open, close) = D::QUOTE;
            let table = format!("{open}{}{close}", self.table_name());
            let counts =
                D::count_records(&self.pool, &table, &filter, Clock::of::<D>(), D::LIST_TIME)
                    .await?;
            Ok(Some(counts))
        })
    }

    fn ttl_floor(&self) -> BoxFuture<'_, Result<Option<Duration>, StoreError>> {
        Box::pin(async move {
            let floor = SqlStore::floor(self).await?;
            Ok((!floor.is_zero()).then_some(floor))
        })
    }

    fn purge_page<'a>(
        &'a self,
        request: PurgeRequest<'a>,
    ) -> BoxFuture<'a, Result<Purged, StoreError>> {
        Box::pin(self.purge_op(request))
    }

    /// The step and the audit row in one transaction, where `audit` is a table in this
    /// store's database ([`SqlAudit`](super::SqlAudit) on the same connection URL).
    fn act_audited<'a>(
        &'a self,
        act: AuditedStep<'a>,
    ) -> Option<BoxFuture<'a, Result<bool, StoreError>>> {
        let table = act.audit.table_in(&database_of(&self.pool))?;
        Some(Box::pin(self.act_audited_op(act, table)))
    }
}
