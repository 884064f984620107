//! The outbox on SQLite: one writer at a time, so a claim (one `UPDATE … RETURNING`) never
//! overlaps another; the batch is then held by its lease. Times are the host clock's
//! microseconds, as in the SQLite store. No wake-ups: relays poll.

use std::time::SystemTime;

use sqlx::{Arguments, Sqlite, SqlitePool};

use super::setup::{message_arguments, with_partial_indexes};
use super::shared::sealed::{OutboxSteps, PurgePlace};
use super::shared::{COLUMNS, ClaimedRow, claimed, codec};
use super::{ClaimBatch, Claimed, DEFAULT_OUTBOX_TABLE, Outbox, OutboxMessage, OutboxSql};
use idempotency_core::StoreError;
use idempotency_sql::InTransaction;
use idempotency_sql::from_sqlx as map_err;
use idempotency_sql::support::{Steps, micros, unix_micros};

/// Which rows a purge takes: sent before `?1` (Unix microseconds), at most `?2`.
const SENT_BEFORE: &str = "state = 'sent' AND sent_at < ?1";

/// Where a purge runs: one writer at a time, from `BEGIN IMMEDIATE` on.
const PURGE: PurgePlace = PurgePlace {
    quote: ("\"", "\""),
    now: "CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)",
    lock: "",
    begin: Some("BEGIN IMMEDIATE"),
};

fn now() -> i64 {
    unix_micros(SystemTime::now())
}

fn statements(t: &str) -> OutboxSql {
    let create = format!(
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
    );
    OutboxSql {
        table: t.to_owned(),
        steps: vec![with_partial_indexes(create, t)],
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
             RETURNING {COLUMNS}, ?3 - created_at AS age_us"
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
            "UPDATE \"{t}\" SET attempts = attempts + 1, last_error = ?, claim = NULL, \
               state = CASE WHEN ? THEN 'dead' ELSE 'pending' END, available_at = ? \
             WHERE seq = ? AND claim = ? AND state = 'pending'"
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
            "SELECT {COLUMNS}, created_at AS created_us, sent_at AS sent_us FROM \"{t}\" \
             WHERE {SENT_BEFORE} ORDER BY sent_at LIMIT ?2"
        ),
        archives: std::sync::Mutex::default(),
        dead: format!(
            "SELECT {COLUMNS}, last_error FROM \"{t}\" WHERE state = 'dead' ORDER BY seq LIMIT ?1"
        ),
        revive: format!(
            "UPDATE \"{t}\" SET state = 'pending', attempts = 0, claim = NULL, available_at = ? \
             WHERE id = ? AND state = 'dead'"
        ),
        counts: format!(
            "SELECT coalesce(sum(state = 'pending'), 0), coalesce(sum(state = 'sent'), 0), \
               coalesce(sum(state = 'dead'), 0), \
               coalesce(sum(state = 'pending' AND claim IS NOT NULL AND available_at > ?1), 0), \
               coalesce(sum(state = 'pending' AND available_at <= ?1), 0), \
               ?1 - min(CASE WHEN state = 'pending' THEN created_at END) \
             FROM \"{t}\""
        ),
    }
}

impl Outbox<Sqlite> {
    /// The outbox table `idempotency_outbox` in `pool`'s database.
    pub fn sqlite(pool: SqlitePool) -> Self {
        Self::with_sql(pool, statements(DEFAULT_OUTBOX_TABLE))
    }

    /// Enqueues `message` inside `tx` (begun with `BEGIN IMMEDIATE`, as
    /// [`TxStore::begin`](idempotency_sql::TxStore::begin) does): it is delivered only if `tx`
    /// commits. `false` if a message with this id was enqueued before (and not purged yet):
    /// nothing is added.
    pub async fn enqueue<T: InTransaction<Sqlite> + ?Sized>(
        &self,
        tx: &mut T,
        message: &OutboxMessage,
    ) -> Result<bool, StoreError> {
        // Its due and creation time: now.
        let mut args = message_arguments::<Sqlite>(message)?;
        args.add(now()).map_err(codec)?;
        let done = sqlx::query_with(&self.sql.enqueue, args)
            .execute(tx.connection())
            .await
            .map_err(map_err)?;
        Ok(done.rows_affected() == 1)
    }
}

/// One writer at a time: a claim is one `UPDATE … RETURNING`; times are the host clock's; no
/// wake-ups (relays poll).
impl OutboxSteps for Sqlite {
    const HOST_CLOCK: bool = true;

    fn statements(table: &str) -> OutboxSql {
        statements(table)
    }

    /// Serialized by `BEGIN IMMEDIATE`.
    async fn migrate_table(
        pool: &SqlitePool,
        table: &str,
        steps: &Steps,
    ) -> Result<(), StoreError> {
        idempotency_sql::support::migrate_sqlite_table(pool, table, steps, None).await
    }

    async fn claim(outbox: &Outbox<Self>, batch: ClaimBatch) -> Result<Vec<Claimed>, StoreError> {
        let now = now();
        let rows: Vec<ClaimedRow> = sqlx::query_as(&outbox.sql.claim)
            .bind(batch.claim)
            .bind(now.saturating_add(micros(batch.lease)))
            .bind(now)
            .bind(i64::try_from(batch.limit).unwrap_or(i64::MAX))
            .fetch_all(&outbox.pool)
            .await
            .map_err(map_err)?;
        Ok(claimed(rows, batch.claim))
    }

    async fn purge_place(_outbox: &Outbox<Self>) -> Result<PurgePlace, StoreError> {
        Ok(PURGE)
    }
}
