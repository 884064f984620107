//! The outbox on PostgreSQL: `FOR UPDATE SKIP LOCKED` claims, `pg_notify` wake-ups.

use sqlx::{Arguments, PgPool, Postgres};

use super::setup::{message_arguments, with_partial_indexes};
use super::shared::sealed::{OutboxSteps, PurgePlace};
use super::shared::{COLUMNS, ClaimedRow, claimed, codec};
use super::{
    ClaimBatch, Claimed, DEFAULT_OUTBOX_TABLE, Notifications, Outbox, OutboxMessage, OutboxSql,
};
use idempotency_core::StoreError;
use idempotency_sql::InTransaction;
use idempotency_sql::from_sqlx as map_err;
use idempotency_sql::support::{Steps, micros};

/// The time `$n` microseconds from the database's clock (a bound span; negative: earlier).
fn at(n: u8) -> String {
    format!("(statement_timestamp() + ${n} * interval '1 microsecond')")
}

/// Which rows a purge takes: sent before the time `$1`, at most `$2`.
fn sent_before() -> String {
    format!("state = 'sent' AND sent_at < {}", at(1))
}

/// Where a purge runs.
const PURGE: PurgePlace = PurgePlace {
    quote: ("\"", "\""),
    now: "statement_timestamp()",
    lock: " FOR UPDATE SKIP LOCKED",
    begin: None,
};

fn statements(t: &str) -> OutboxSql {
    let create = format!(
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
    );
    OutboxSql {
        table: t.to_owned(),
        steps: vec![with_partial_indexes(create, t)],
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
             RETURNING {COLUMNS}, \
               (extract(epoch FROM statement_timestamp() - created_at) * 1000000)::bigint AS age_us"
        ),
        claim_update: String::new(),
        claim_read: String::new(),
        skip_locked: std::sync::OnceLock::from(true),
        mark_sent: format!(
            "UPDATE \"{t}\" SET state = 'sent', sent_at = {}, claim = NULL, last_error = NULL \
             WHERE claim = $2 AND state = 'pending' AND seq IN (",
            at(1)
        ),
        mark_failed: format!(
            "UPDATE \"{t}\" SET attempts = attempts + 1, last_error = $1, claim = NULL, \
               state = CASE WHEN $2 THEN 'dead' ELSE 'pending' END, available_at = {} \
             WHERE seq = $4 AND claim = $5 AND state = 'pending'",
            at(3)
        ),
        release: format!(
            "UPDATE \"{t}\" SET claim = NULL, available_at = {} \
             WHERE claim = $2 AND state = 'pending' AND seq IN (",
            at(1)
        ),
        extend: format!(
            "UPDATE \"{t}\" SET available_at = {} \
             WHERE claim = $2 AND state = 'pending' AND seq IN (",
            at(1)
        ),
        next_due: format!(
            "SELECT greatest(0, (extract(epoch FROM min(available_at) - {}) \
               * 1000000)::bigint) FROM \"{t}\" WHERE state = 'pending'",
            at(1)
        ),
        purge_sent: format!(
            "DELETE FROM \"{t}\" WHERE seq IN (\
               SELECT seq FROM \"{t}\" WHERE {} ORDER BY sent_at LIMIT $2)",
            sent_before()
        ),
        purge_pick: format!(
            "SELECT seq FROM \"{t}\" WHERE {} ORDER BY sent_at LIMIT $2",
            sent_before()
        ),
        purge_read: format!(
            "SELECT {COLUMNS}, (extract(epoch FROM created_at) * 1000000)::bigint AS created_us, \
               (extract(epoch FROM sent_at) * 1000000)::bigint AS sent_us \
             FROM \"{t}\" WHERE {} ORDER BY sent_at LIMIT $2",
            sent_before()
        ),
        archives: std::sync::Mutex::default(),
        dead: format!(
            "SELECT {COLUMNS}, last_error FROM \"{t}\" WHERE state = 'dead' ORDER BY seq LIMIT $1"
        ),
        revive: format!(
            "UPDATE \"{t}\" SET state = 'pending', attempts = 0, claim = NULL, available_at = {} \
             WHERE id = $2 AND state = 'dead'",
            at(1)
        ),
        counts: format!(
            "SELECT count(*) FILTER (WHERE state = 'pending'), \
               count(*) FILTER (WHERE state = 'sent'), \
               count(*) FILTER (WHERE state = 'dead'), \
               count(*) FILTER (WHERE state = 'pending' AND claim IS NOT NULL \
                 AND available_at > {now}), \
               count(*) FILTER (WHERE state = 'pending' AND available_at <= {now}), \
               (extract(epoch FROM {now} - min(created_at) FILTER (WHERE state = 'pending')) \
                 * 1000000)::bigint \
             FROM \"{t}\"",
            now = at(1)
        ),
    }
}

impl Outbox<Postgres> {
    /// The outbox table `idempotency_outbox` in `pool`'s database.
    pub fn postgres(pool: PgPool) -> Self {
        Self::with_sql(pool, statements(DEFAULT_OUTBOX_TABLE))
    }

    /// Enqueues `message` inside `tx`: it is delivered only if `tx` commits, and the relays
    /// listening are woken at the commit. `false` if a message with this id was enqueued before
    /// (and not purged yet): nothing is added.
    pub async fn enqueue<T: InTransaction<Postgres> + ?Sized>(
        &self,
        tx: &mut T,
        message: &OutboxMessage,
    ) -> Result<bool, StoreError> {
        // The channel to notify: the table's name.
        let mut args = message_arguments::<Postgres>(message)?;
        args.add(self.sql.table.as_str()).map_err(codec)?;
        let added: i64 = sqlx::query_scalar_with(&self.sql.enqueue, args)
            .fetch_one(tx.connection())
            .await
            .map_err(map_err)?;
        Ok(added == 1)
    }
}

/// Claims in one statement (`FOR UPDATE SKIP LOCKED`); wakes relays with `LISTEN`.
impl OutboxSteps for Postgres {
    const HOST_CLOCK: bool = false;

    fn statements(table: &str) -> OutboxSql {
        statements(table)
    }

    /// Serialized by an advisory lock, in one transaction.
    async fn migrate_table(pool: &PgPool, table: &str, steps: &Steps) -> Result<(), StoreError> {
        idempotency_sql::support::migrate_postgres_table(pool, table, steps, None).await
    }

    async fn claim(outbox: &Outbox<Self>, batch: ClaimBatch) -> Result<Vec<Claimed>, StoreError> {
        let rows: Vec<ClaimedRow> = sqlx::query_as(&outbox.sql.claim)
            .bind(batch.claim)
            .bind(micros(batch.lease))
            .bind(i64::try_from(batch.limit).unwrap_or(i64::MAX))
            .fetch_all(&outbox.pool)
            .await
            .map_err(map_err)?;
        Ok(claimed(rows, batch.claim))
    }

    async fn listen(outbox: &Outbox<Self>) -> Result<Notifications, StoreError> {
        let mut listener = sqlx::postgres::PgListener::connect_with(&outbox.pool)
            .await
            .map_err(map_err)?;
        listener.listen(&outbox.sql.table).await.map_err(map_err)?;
        Ok(Notifications {
            listener: Some(listener),
        })
    }

    async fn purge_place(_outbox: &Outbox<Self>) -> Result<PurgePlace, StoreError> {
        Ok(PURGE)
    }
}
