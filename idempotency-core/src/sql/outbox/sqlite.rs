//! The outbox on SQLite: one writer at a time, so a claim (one `UPDATE … RETURNING`) never
//! overlaps another; the batch is then held by its lease. Times are the host clock's
//! microseconds, as in the SQLite store. No wake-ups: relays poll.

use std::time::{Duration, SystemTime};

use sqlx::{Sqlite, SqlitePool};

use super::shared::{OutboxShared, PurgePlace};
use super::{
    Archive, ClaimBatch, Claimed, DEFAULT_OUTBOX_TABLE, DeadMessage, Notifications, Outbox,
    OutboxCounts, OutboxMessage, OutboxSql, OutboxTable, attempts, checked_table, in_list,
};
use crate::StoreError;
use crate::sql::common::{map_err, micros, unix_micros};
use crate::sql::tx::InTransaction;

/// The columns a claim and a dead listing read, in [`Row`]'s order.
const COLUMNS: &str = "seq, id, topic, business_key, aggregate, payload, attempts";

/// Which rows a purge takes: sent before `?1` (Unix microseconds).
const SENT_BEFORE: &str = "state = 'sent' AND sent_at < ?1";

/// Where a purge runs: one writer at a time, from `BEGIN IMMEDIATE` on.
const PURGE: PurgePlace = PurgePlace {
    quote: ("\"", "\""),
    now: "CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)",
    lock: "",
    begin: Some("BEGIN IMMEDIATE"),
};

/// A message row: [`COLUMNS`].
type Row = (i64, String, String, String, Option<String>, Vec<u8>, i64);

fn message((_, id, topic, key, aggregate, payload, _): Row) -> OutboxMessage {
    OutboxMessage {
        id,
        topic,
        key,
        aggregate,
        payload,
    }
}

fn now() -> i64 {
    unix_micros(SystemTime::now())
}

fn statements(t: &str) -> OutboxSql {
    let steps = vec![vec![
        format!(
            "CREATE TABLE IF NOT EXISTS \"{t}\" (\
             seq INTEGER PRIMARY KEY AUTOINCREMENT, \
             id TEXT NOT NULL UNIQUE, \
             topic TEXT NOT NULL, \
             business_key TEXT NOT NULL, \
             aggregate TEXT, \
             payload BLOB NOT NULL, \
             state TEXT NOT NULL DEFAULT 'pending', \
             attempts INTEGER NOT NULL DEFAULT 0, \
             available_at INTEGER NOT NULL, \
             claim INTEGER, \
             last_error TEXT, \
             created_at INTEGER NOT NULL, \
             sent_at INTEGER)"
        ),
        format!(
            "CREATE INDEX IF NOT EXISTS \"{t}_due\" ON \"{t}\" (available_at, seq) \
             WHERE state = 'pending'"
        ),
        format!(
            "CREATE INDEX IF NOT EXISTS \"{t}_aggregate\" ON \"{t}\" (aggregate, seq) \
             WHERE aggregate IS NOT NULL AND state <> 'sent'"
        ),
        format!(
            "CREATE INDEX IF NOT EXISTS \"{t}_sent\" ON \"{t}\" (sent_at) WHERE state = 'sent'"
        ),
    ]];
    OutboxSql {
        table: t.to_owned(),
        steps,
        enqueue: format!(
            "INSERT INTO \"{t}\" \
             (id, topic, business_key, aggregate, payload, available_at, created_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6) ON CONFLICT (id) DO NOTHING"
        ),
        // Earlier unsent messages of the aggregate (claimed ones included) hold a message back.
        claim: format!(
            "UPDATE \"{t}\" SET claim = ?1, available_at = ?2 \
             WHERE seq IN (\
               SELECT o.seq FROM \"{t}\" o \
               WHERE o.state = 'pending' AND o.available_at <= ?3 \
                 AND (o.aggregate IS NULL OR NOT EXISTS (\
                   SELECT 1 FROM \"{t}\" e WHERE e.aggregate = o.aggregate \
                     AND e.seq < o.seq AND e.state <> 'sent')) \
               ORDER BY o.available_at, o.seq LIMIT ?4) \
             RETURNING {COLUMNS}"
        ),
        claim_update: String::new(),
        claim_read: String::new(),
        // One writer at a time: nothing to skip.
        skip_locked: std::sync::OnceLock::from(false),
        mark_sent: format!(
            "UPDATE \"{t}\" SET state = 'sent', sent_at = ?, claim = NULL, last_error = NULL \
             WHERE claim = ? AND state = 'pending' AND seq IN ("
        ),
        mark_failed: format!(
            "UPDATE \"{t}\" SET attempts = attempts + 1, last_error = ?1, claim = NULL, \
               state = CASE WHEN ?2 THEN 'dead' ELSE 'pending' END, available_at = ?3 \
             WHERE seq = ?4 AND claim = ?5 AND state = 'pending'"
        ),
        release: format!(
            "UPDATE \"{t}\" SET claim = NULL, available_at = ? \
             WHERE claim = ? AND state = 'pending' AND seq IN ("
        ),
        extend: format!(
            "UPDATE \"{t}\" SET available_at = ? \
             WHERE claim = ? AND state = 'pending' AND seq IN ("
        ),
        next_due: format!(
            "SELECT max(0, min(available_at) - ?1) FROM \"{t}\" WHERE state = 'pending'"
        ),
        purge_sent: format!(
            "DELETE FROM \"{t}\" WHERE seq IN (\
               SELECT seq FROM \"{t}\" WHERE {SENT_BEFORE} ORDER BY sent_at LIMIT ?2)"
        ),
        purge_pick: format!(
            "SELECT seq FROM \"{t}\" WHERE {SENT_BEFORE} ORDER BY sent_at LIMIT ?2"
        ),
        purge_read: format!(
            "SELECT {COLUMNS}, created_at, sent_at FROM \"{t}\" \
             WHERE {SENT_BEFORE} ORDER BY sent_at LIMIT ?2"
        ),
        archives: std::sync::Mutex::default(),
        dead: format!(
            "SELECT {COLUMNS}, last_error FROM \"{t}\" WHERE state = 'dead' ORDER BY seq LIMIT ?1"
        ),
        revive: format!(
            "UPDATE \"{t}\" SET state = 'pending', attempts = 0, claim = NULL, available_at = ?2 \
             WHERE id = ?1 AND state = 'dead'"
        ),
        counts: format!(
            "SELECT coalesce(sum(state = 'pending'), 0), coalesce(sum(state = 'sent'), 0), \
               coalesce(sum(state = 'dead'), 0) FROM \"{t}\""
        ),
    }
}

impl Outbox<Sqlite> {
    /// The outbox table `idempotency_outbox` in `pool`'s database.
    pub fn sqlite(pool: SqlitePool) -> Self {
        Self::with_sql(pool, statements(DEFAULT_OUTBOX_TABLE))
    }

    /// The same outbox in the table `table` (a plain identifier).
    pub fn with_table_name(self, table: &str) -> Result<Self, StoreError> {
        checked_table(table)?;
        Ok(Self::with_sql(self.pool, statements(table)))
    }

    /// Creates the table or brings it to this release's schema (versioned like record tables,
    /// in one `BEGIN IMMEDIATE` transaction, quiet when up to date).
    pub async fn migrate(&self) -> Result<(), StoreError> {
        crate::sql::sqlite::migrate_table(&self.pool, &self.sql.table, &self.sql.steps).await
    }

    /// Enqueues `message` inside `tx` (begun with `BEGIN IMMEDIATE`, as
    /// [`TxStore::begin`](crate::sql::TxStore::begin) does): it is delivered only if `tx`
    /// commits. `false` if a message with this id was enqueued before (and not purged yet):
    /// nothing is added.
    pub async fn enqueue<T: InTransaction<Sqlite> + ?Sized>(
        &self,
        tx: &mut T,
        message: &OutboxMessage,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(&self.sql.enqueue)
            .bind(&message.id)
            .bind(&message.topic)
            .bind(&message.key)
            .bind(message.aggregate.as_deref())
            .bind(message.payload.as_slice())
            .bind(now())
            .execute(tx.connection())
            .await
            .map_err(map_err)?;
        Ok(done.rows_affected() == 1)
    }

    /// Runs `sql` (ending in `seq IN (`) with `leading` bound first, then `seqs`.
    async fn with_seqs(&self, sql: &str, leading: &[i64], seqs: &[i64]) -> Result<u64, StoreError> {
        let statement = in_list(sql, seqs.len());
        let mut query = sqlx::query(&statement);
        for value in leading.iter().chain(seqs) {
            query = query.bind(value);
        }
        let done = query.execute(&self.pool).await.map_err(map_err)?;
        Ok(done.rows_affected())
    }
}

/// `now + span` in microseconds.
fn after(span: Duration) -> i64 {
    now().saturating_add(micros(span))
}

impl OutboxTable for Outbox<Sqlite> {
    fn table_name(&self) -> &str {
        &self.sql.table
    }

    async fn claim(&self, batch: ClaimBatch) -> Result<Vec<Claimed>, StoreError> {
        let now = now();
        let rows: Vec<Row> = sqlx::query_as(&self.sql.claim)
            .bind(batch.claim)
            .bind(now.saturating_add(micros(batch.lease)))
            .bind(now)
            .bind(i64::try_from(batch.limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        let mut claimed: Vec<Claimed> = rows
            .into_iter()
            .map(|row| Claimed {
                seq: row.0,
                claim: batch.claim,
                attempts: attempts(row.6),
                message: message(row),
            })
            .collect();
        claimed.sort_by_key(|claimed| claimed.seq);
        Ok(claimed)
    }

    async fn mark_sent(&self, claim: i64, seqs: &[i64]) -> Result<u64, StoreError> {
        if seqs.is_empty() {
            return Ok(0);
        }
        self.with_seqs(&self.sql.mark_sent, &[now(), claim], seqs)
            .await
    }

    async fn mark_failed(
        &self,
        claim: i64,
        seq: i64,
        error: &str,
        retry_in: Duration,
        dead: bool,
    ) -> Result<(), StoreError> {
        sqlx::query(&self.sql.mark_failed)
            .bind(error)
            .bind(dead)
            .bind(after(retry_in))
            .bind(seq)
            .bind(claim)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn release(
        &self,
        claim: i64,
        seqs: &[i64],
        retry_in: Duration,
    ) -> Result<(), StoreError> {
        if seqs.is_empty() {
            return Ok(());
        }
        self.with_seqs(&self.sql.release, &[after(retry_in), claim], seqs)
            .await?;
        Ok(())
    }

    async fn extend(&self, claim: i64, seqs: &[i64], lease: Duration) -> Result<u64, StoreError> {
        if seqs.is_empty() {
            return Ok(0);
        }
        self.with_seqs(&self.sql.extend, &[after(lease), claim], seqs)
            .await
    }

    async fn next_due(&self) -> Result<Option<Duration>, StoreError> {
        let due: Option<i64> = sqlx::query_scalar(&self.sql.next_due)
            .bind(now())
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(due.map(|micros| Duration::from_micros(u64::try_from(micros).unwrap_or(0))))
    }

    async fn listen(&self) -> Result<Notifications, StoreError> {
        Ok(Notifications::none())
    }

    async fn purge_sent(
        &self,
        older_than: Duration,
        limit: usize,
        archive: &mut Archive,
    ) -> Result<u64, StoreError> {
        let before = now().saturating_sub(micros(older_than));
        Sqlite::purge_sent(&self.pool, &self.sql, PURGE, before, limit, archive).await
    }

    async fn dead(&self, limit: usize) -> Result<Vec<DeadMessage>, StoreError> {
        type DeadRow = (
            i64,
            String,
            String,
            String,
            Option<String>,
            Vec<u8>,
            i64,
            Option<String>,
        );
        let rows: Vec<DeadRow> = sqlx::query_as(&self.sql.dead)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(rows
            .into_iter()
            .map(
                |(seq, id, topic, key, aggregate, payload, tries, last_error)| DeadMessage {
                    seq,
                    attempts: attempts(tries),
                    last_error,
                    message: message((seq, id, topic, key, aggregate, payload, tries)),
                },
            )
            .collect())
    }

    async fn revive(&self, id: &str) -> Result<bool, StoreError> {
        let done = sqlx::query(&self.sql.revive)
            .bind(id)
            .bind(now())
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(done.rows_affected() == 1)
    }

    async fn counts(&self) -> Result<OutboxCounts, StoreError> {
        let (pending, sent, dead): (i64, i64, i64) = sqlx::query_as(&self.sql.counts)
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)?;
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        Ok(OutboxCounts {
            pending: count(pending),
            sent: count(sent),
            dead: count(dead),
        })
    }
}
