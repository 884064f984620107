//! The outbox on PostgreSQL: `FOR UPDATE SKIP LOCKED` claims, `pg_notify` wake-ups.

use std::time::Duration;

use sqlx::{PgPool, Postgres};

use super::shared::{OutboxShared, PurgePlace};
use super::{
    Archive, ClaimBatch, Claimed, DEFAULT_OUTBOX_TABLE, DeadMessage, Notifications, Outbox,
    OutboxCounts, OutboxMessage, OutboxSql, OutboxTable, attempts, checked_table,
};
use crate::StoreError;
use crate::sql::common::{map_err, micros};
use crate::sql::tx::InTransaction;

/// The columns a claim and a dead listing read, in [`Row`]'s order.
const COLUMNS: &str = "seq, id, topic, business_key, aggregate, payload, attempts";

/// Which rows a purge takes: sent before `$1` microseconds from now (a negative span).
const SENT_BEFORE: &str =
    "state = 'sent' AND sent_at < statement_timestamp() + $1 * interval '1 microsecond'";

/// Where a purge runs.
const PURGE: PurgePlace = PurgePlace {
    quote: ("\"", "\""),
    now: "statement_timestamp()",
    lock: " FOR UPDATE SKIP LOCKED",
    begin: None,
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

fn statements(t: &str) -> OutboxSql {
    let steps = vec![vec![
        format!(
            "CREATE TABLE IF NOT EXISTS \"{t}\" (\
             seq BIGSERIAL PRIMARY KEY, \
             id TEXT NOT NULL UNIQUE, \
             topic TEXT NOT NULL, \
             business_key TEXT NOT NULL, \
             aggregate TEXT, \
             payload BYTEA NOT NULL, \
             state TEXT NOT NULL DEFAULT 'pending', \
             attempts BIGINT NOT NULL DEFAULT 0, \
             available_at TIMESTAMPTZ NOT NULL DEFAULT statement_timestamp(), \
             claim BIGINT, \
             last_error TEXT, \
             created_at TIMESTAMPTZ NOT NULL DEFAULT statement_timestamp(), \
             sent_at TIMESTAMPTZ)"
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
        // The notification is only sent when a row went in; PostgreSQL delivers it at commit
        // (and drops it on rollback). Referencing `woken` makes the CTE run.
        enqueue: format!(
            "WITH fresh AS (\
               INSERT INTO \"{t}\" (id, topic, business_key, aggregate, payload) \
               VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING RETURNING seq), \
             woken AS (SELECT pg_notify($6, '') FROM fresh) \
             SELECT (SELECT count(*) FROM fresh) + 0 * (SELECT count(*) FROM woken)"
        ),
        // Earlier unsent messages of the aggregate (claimed ones included) hold a message back.
        claim: format!(
            "UPDATE \"{t}\" SET claim = $1, \
               available_at = statement_timestamp() + $2 * interval '1 microsecond' \
             WHERE seq IN (\
               SELECT o.seq FROM \"{t}\" o \
               WHERE o.state = 'pending' AND o.available_at <= statement_timestamp() \
                 AND (o.aggregate IS NULL OR NOT EXISTS (\
                   SELECT 1 FROM \"{t}\" e WHERE e.aggregate = o.aggregate \
                     AND e.seq < o.seq AND e.state <> 'sent')) \
               ORDER BY o.available_at, o.seq LIMIT $3 \
               FOR UPDATE SKIP LOCKED) \
             RETURNING {COLUMNS}"
        ),
        claim_update: String::new(),
        claim_read: String::new(),
        skip_locked: std::sync::OnceLock::from(true),
        mark_sent: format!(
            "UPDATE \"{t}\" SET state = 'sent', sent_at = statement_timestamp(), claim = NULL, \
               last_error = NULL \
             WHERE seq = ANY($2) AND claim = $1 AND state = 'pending'"
        ),
        mark_failed: format!(
            "UPDATE \"{t}\" SET attempts = attempts + 1, last_error = $3, claim = NULL, \
               state = CASE WHEN $5 THEN 'dead' ELSE 'pending' END, \
               available_at = statement_timestamp() + $4 * interval '1 microsecond' \
             WHERE seq = $2 AND claim = $1 AND state = 'pending'"
        ),
        release: format!(
            "UPDATE \"{t}\" SET claim = NULL, \
               available_at = statement_timestamp() + $3 * interval '1 microsecond' \
             WHERE seq = ANY($2) AND claim = $1 AND state = 'pending'"
        ),
        extend: format!(
            "UPDATE \"{t}\" SET \
               available_at = statement_timestamp() + $3 * interval '1 microsecond' \
             WHERE seq = ANY($2) AND claim = $1 AND state = 'pending'"
        ),
        next_due: format!(
            "SELECT greatest(0, (extract(epoch FROM min(available_at) - statement_timestamp()) \
               * 1000000)::bigint) FROM \"{t}\" WHERE state = 'pending'"
        ),
        purge_sent: format!(
            "DELETE FROM \"{t}\" WHERE seq IN (\
               SELECT seq FROM \"{t}\" WHERE {SENT_BEFORE} ORDER BY sent_at LIMIT $2)"
        ),
        purge_pick: format!(
            "SELECT seq FROM \"{t}\" WHERE {SENT_BEFORE} ORDER BY sent_at LIMIT $2"
        ),
        purge_read: format!(
            "SELECT {COLUMNS}, (extract(epoch FROM created_at) * 1000000)::bigint, \
               (extract(epoch FROM sent_at) * 1000000)::bigint \
             FROM \"{t}\" WHERE {SENT_BEFORE} ORDER BY sent_at LIMIT $2"
        ),
        archives: std::sync::Mutex::default(),
        dead: format!(
            "SELECT {COLUMNS}, last_error FROM \"{t}\" WHERE state = 'dead' ORDER BY seq LIMIT $1"
        ),
        revive: format!(
            "UPDATE \"{t}\" SET state = 'pending', attempts = 0, claim = NULL, \
               available_at = statement_timestamp() WHERE id = $1 AND state = 'dead'"
        ),
        counts: format!(
            "SELECT count(*) FILTER (WHERE state = 'pending'), \
               count(*) FILTER (WHERE state = 'sent'), \
               count(*) FILTER (WHERE state = 'dead') FROM \"{t}\""
        ),
    }
}

impl Outbox<Postgres> {
    /// The outbox table `idempotency_outbox` in `pool`'s database.
    pub fn postgres(pool: PgPool) -> Self {
        Self::with_sql(pool, statements(DEFAULT_OUTBOX_TABLE))
    }

    /// The same outbox in the table `table` (a plain identifier; also the `LISTEN` channel).
    pub fn with_table_name(self, table: &str) -> Result<Self, StoreError> {
        checked_table(table)?;
        Ok(Self::with_sql(self.pool, statements(table)))
    }

    /// Creates the table or brings it to this release's schema (versioned like record tables,
    /// serialized by a lock, quiet when up to date).
    pub async fn migrate(&self) -> Result<(), StoreError> {
        crate::sql::postgres::migrate_table(&self.pool, &self.sql.table, &self.sql.steps).await
    }

    /// Enqueues `message` inside `tx`: it is delivered only if `tx` commits, and the relays
    /// listening are woken at the commit. `false` if a message with this id was enqueued before
    /// (and not purged yet): nothing is added.
    pub async fn enqueue<T: InTransaction<Postgres> + ?Sized>(
        &self,
        tx: &mut T,
        message: &OutboxMessage,
    ) -> Result<bool, StoreError> {
        let added: i64 = sqlx::query_scalar(&self.sql.enqueue)
            .bind(&message.id)
            .bind(&message.topic)
            .bind(&message.key)
            .bind(message.aggregate.as_deref())
            .bind(message.payload.as_slice())
            .bind(&self.sql.table)
            .fetch_one(tx.connection())
            .await
            .map_err(map_err)?;
        Ok(added == 1)
    }
}

impl OutboxTable for Outbox<Postgres> {
    fn table_name(&self) -> &str {
        &self.sql.table
    }

    async fn claim(&self, batch: ClaimBatch) -> Result<Vec<Claimed>, StoreError> {
        let rows: Vec<Row> = sqlx::query_as(&self.sql.claim)
            .bind(batch.claim)
            .bind(micros(batch.lease))
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
        // RETURNING does not keep the subquery's order.
        claimed.sort_by_key(|claimed| claimed.seq);
        Ok(claimed)
    }

    async fn mark_sent(&self, claim: i64, seqs: &[i64]) -> Result<u64, StoreError> {
        let done = sqlx::query(&self.sql.mark_sent)
            .bind(claim)
            .bind(seqs)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(done.rows_affected())
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
            .bind(claim)
            .bind(seq)
            .bind(error)
            .bind(micros(retry_in))
            .bind(dead)
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
        sqlx::query(&self.sql.release)
            .bind(claim)
            .bind(seqs)
            .bind(micros(retry_in))
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn extend(&self, claim: i64, seqs: &[i64], lease: Duration) -> Result<u64, StoreError> {
        let done = sqlx::query(&self.sql.extend)
            .bind(claim)
            .bind(seqs)
            .bind(micros(lease))
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(done.rows_affected())
    }

    async fn next_due(&self) -> Result<Option<Duration>, StoreError> {
        let due: Option<i64> = sqlx::query_scalar(&self.sql.next_due)
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(due.map(|micros| Duration::from_micros(u64::try_from(micros).unwrap_or(0))))
    }

    async fn listen(&self) -> Result<Notifications, StoreError> {
        let mut listener = sqlx::postgres::PgListener::connect_with(&self.pool)
            .await
            .map_err(map_err)?;
        listener.listen(&self.sql.table).await.map_err(map_err)?;
        Ok(Notifications {
            listener: Some(listener),
        })
    }

    async fn purge_sent(
        &self,
        older_than: Duration,
        limit: usize,
        archive: &mut Archive,
    ) -> Result<u64, StoreError> {
        let before = micros(older_than).saturating_neg();
        Postgres::purge_sent(&self.pool, &self.sql, PURGE, before, limit, archive).await
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
