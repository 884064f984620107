//! The outbox on MySQL/MariaDB: claims pick their batch with `FOR UPDATE SKIP LOCKED` where the
//! server has it (MySQL 8.0.1+, MariaDB 10.6+), with a plain `FOR UPDATE` otherwise; either way
//! the batch is then held by its lease, not by the lock. No wake-ups: relays poll.

use sqlx::mysql::MySqlArguments;
use sqlx::{Arguments, MySql, MySqlPool};

use super::setup::message_arguments;
use super::shared::sealed::{OutboxSteps, PurgePlace};
use super::shared::{COLUMNS, ClaimedRow, DEADLOCK_ROUNDS, claimed, in_list_after};
use super::{ClaimBatch, Claimed, DEFAULT_OUTBOX_TABLE, Outbox, OutboxMessage, OutboxSql};
use idempotency_core::StoreError;
use idempotency_sql::InTransaction;
use idempotency_sql::from_sqlx as map_err;
use idempotency_sql::support::{Steps, micros};

/// MySQL's error number for a duplicate key.
const DUPLICATE_KEY: u16 = 1062;
/// MySQL's error number for a deadlock (InnoDB rolled the transaction back).
const DEADLOCK: u16 = 1213;
/// Whether `error` is MySQL's error `number`.
fn is_error(error: &sqlx::Error, number: u16) -> bool {
    matches!(error, sqlx::Error::Database(error)
        if error
            .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .is_some_and(|error| error.number() == number))
}

/// Runs `attempt` again while it fails as a deadlock's victim, at most [`DEADLOCK_ROUNDS`] times.
async fn retry_deadlocks<T, F, Fut>(mut attempt: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, sqlx::Error>>,
{
    let mut round = 1;
    loop {
        match attempt().await {
            Err(error) if is_error(&error, DEADLOCK) && round < DEADLOCK_ROUNDS => round += 1,
            done => return done.map_err(map_err),
        }
    }
}

/// Which rows a purge takes: sent before `?` microseconds from now (a negative span).
const SENT_BEFORE: &str = "state = 'sent' AND sent_at < UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND";

/// A time column as Unix microseconds: this, the column, `)`.
const EPOCH_MICROS: &str = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', ";

fn statements(t: &str) -> OutboxSql {
    let steps = vec![vec![format!(
        "CREATE TABLE IF NOT EXISTS {t} (\
         seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, \
         id VARCHAR(255) NOT NULL, \
         topic VARCHAR(1024) NOT NULL, \
         business_key VARCHAR(255) NOT NULL, \
         aggregate VARCHAR(255) NULL, \
         payload LONGBLOB NOT NULL, \
         state VARCHAR(16) NOT NULL DEFAULT 'pending', \
         attempts BIGINT NOT NULL DEFAULT 0, \
         available_at DATETIME(6) NOT NULL, \
         claim BIGINT NULL, \
         last_error TEXT NULL, \
         created_at DATETIME(6) NOT NULL, \
         sent_at DATETIME(6) NULL, \
         UNIQUE KEY {t}_id (id), \
         KEY {t}_due (state, available_at, seq), \
         KEY {t}_aggregate (aggregate, seq), \
         KEY {t}_sent (state, sent_at)) ENGINE = InnoDB"
    )]];
    let later = "UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND";
    OutboxSql {
        table: t.to_owned(),
        steps,
        enqueue: format!(
            "INSERT INTO {t} (id, topic, business_key, aggregate, payload, available_at, created_at) \
             VALUES (?, ?, ?, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))"
        ),
        // Earlier unsent messages of the aggregate (claimed ones included) hold a message back.
        // `FOR UPDATE` (and `SKIP LOCKED`, appended where the server has it) locks the outer
        // rows only: the subquery is a plain read.
        claim: format!(
            "SELECT o.seq FROM {t} o \
             WHERE o.state = 'pending' AND o.available_at <= UTC_TIMESTAMP(6) \
               AND (o.aggregate IS NULL OR NOT EXISTS (\
                 SELECT 1 FROM {t} e WHERE e.aggregate = o.aggregate \
                   AND e.seq < o.seq AND e.state <> 'sent')) \
             ORDER BY o.available_at, o.seq LIMIT ? FOR UPDATE"
        ),
        claim_update: format!("UPDATE {t} SET claim = ?, available_at = {later} WHERE seq IN ("),
        claim_read: format!(
            "SELECT {COLUMNS}, TIMESTAMPDIFF(MICROSECOND, created_at, UTC_TIMESTAMP(6)) AS age_us \
             FROM {t} WHERE claim = ? ORDER BY seq"
        ),
        skip_locked: std::sync::OnceLock::new(),
        mark_sent: format!(
            "UPDATE {t} SET state = 'sent', sent_at = {later}, claim = NULL, last_error = NULL \
             WHERE claim = ? AND state = 'pending' AND seq IN ("
        ),
        mark_failed: format!(
            "UPDATE {t} SET attempts = attempts + 1, last_error = ?, claim = NULL, \
               state = IF(?, 'dead', 'pending'), available_at = {later} \
             WHERE seq = ? AND claim = ? AND state = 'pending'"
        ),
        release: format!(
            "UPDATE {t} SET claim = NULL, available_at = {later} \
             WHERE claim = ? AND state = 'pending' AND seq IN ("
        ),
        extend: format!(
            "UPDATE {t} SET available_at = {later} \
             WHERE claim = ? AND state = 'pending' AND seq IN ("
        ),
        next_due: format!(
            "SELECT CAST(GREATEST(0, TIMESTAMPDIFF(MICROSECOND, {later}, MIN(available_at))) \
               AS SIGNED) FROM {t} WHERE state = 'pending'"
        ),
        purge_sent: format!("DELETE FROM {t} WHERE {SENT_BEFORE} ORDER BY sent_at LIMIT ?"),
        purge_pick: format!("SELECT seq FROM {t} WHERE {SENT_BEFORE} ORDER BY sent_at LIMIT ?"),
        purge_read: format!(
            "SELECT {COLUMNS}, {EPOCH_MICROS}created_at) AS created_us, \
               {EPOCH_MICROS}sent_at) AS sent_us \
             FROM {t} WHERE {SENT_BEFORE} ORDER BY sent_at LIMIT ?"
        ),
        archives: std::sync::Mutex::default(),
        dead: format!(
            "SELECT {COLUMNS}, last_error FROM {t} WHERE state = 'dead' ORDER BY seq LIMIT ?"
        ),
        revive: format!(
            "UPDATE {t} SET state = 'pending', attempts = 0, claim = NULL, \
               available_at = {later} WHERE id = ? AND state = 'dead'"
        ),
        // The time is bound once, in the derived table `n`.
        counts: format!(
            "SELECT CAST(COALESCE(SUM(o.state = 'pending'), 0) AS SIGNED), \
               CAST(COALESCE(SUM(o.state = 'sent'), 0) AS SIGNED), \
               CAST(COALESCE(SUM(o.state = 'dead'), 0) AS SIGNED), \
               CAST(COALESCE(SUM(o.state = 'pending' AND o.claim IS NOT NULL \
                 AND o.available_at > n.now_at), 0) AS SIGNED), \
               CAST(COALESCE(SUM(o.state = 'pending' AND o.available_at <= n.now_at), 0) \
                 AS SIGNED), \
               CAST(TIMESTAMPDIFF(MICROSECOND, \
                 MIN(CASE WHEN o.state = 'pending' THEN o.created_at END), MAX(n.now_at)) \
                 AS SIGNED) \
             FROM {t} o CROSS JOIN (SELECT {later} AS now_at) n"
        ),
    }
}

/// Whether a server of `version` (`SELECT VERSION()`) has `SKIP LOCKED`: MySQL 8.0.1+, MariaDB
/// 10.6+.
fn has_skip_locked(version: &str) -> bool {
    let mut numbers = version
        .split(|c: char| !c.is_ascii_digit())
        .map(|part| part.parse::<u32>().unwrap_or(0));
    let (major, minor, patch) = (
        numbers.next().unwrap_or(0),
        numbers.next().unwrap_or(0),
        numbers.next().unwrap_or(0),
    );
    if version.contains("MariaDB") {
        (major, minor) >= (10, 6)
    } else {
        (major, minor, patch) >= (8, 0, 1)
    }
}

impl Outbox<MySql> {
    /// The outbox table `idempotency_outbox` in `pool`'s database.
    pub fn mysql(pool: MySqlPool) -> Self {
        Self::with_sql(pool, statements(DEFAULT_OUTBOX_TABLE))
    }

    /// Claims with a plain `FOR UPDATE` even where the server has `SKIP LOCKED`: concurrent
    /// relays then wait for each other's (short) claim instead of skipping its rows, as on
    /// servers without it. For such servers' behaviour on a newer one (tests, comparisons).
    pub fn without_skip_locked(self) -> Self {
        let outbox = Self::with_sql(self.pool, statements(&self.sql.table));
        let _ = outbox.sql.skip_locked.set(false);
        outbox
    }

    /// Whether claims skip rows other relays hold (`SKIP LOCKED`): the server's version decides.
    pub async fn skips_locked(&self) -> Result<bool, StoreError> {
        if let Some(skips) = self.sql.skip_locked.get() {
            return Ok(*skips);
        }
        let version: String = sqlx::query_scalar("SELECT VERSION()")
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(*self
            .sql
            .skip_locked
            .get_or_init(|| has_skip_locked(&version)))
    }

    /// Enqueues `message` inside `tx`: it is delivered only if `tx` commits. `false` if a message
    /// with this id was enqueued before (and not purged yet): nothing is added, and the
    /// transaction goes on.
    pub async fn enqueue<T: InTransaction<MySql> + ?Sized>(
        &self,
        tx: &mut T,
        message: &OutboxMessage,
    ) -> Result<bool, StoreError> {
        let args = message_arguments::<MySql>(message)?;
        let inserted = sqlx::query_with(&self.sql.enqueue, args)
            .execute(tx.connection())
            .await;
        match inserted {
            Ok(_) => Ok(true),
            // MySQL rolls back only the failed statement: the transaction goes on.
            Err(error) if is_error(&error, DUPLICATE_KEY) => Ok(false),
            Err(error) => Err(map_err(error)),
        }
    }

    /// One claim transaction: pick the batch with a locking read, claim it, read it back.
    async fn claim_once(
        &self,
        batch: ClaimBatch,
        pick: &str,
    ) -> Result<Vec<ClaimedRow>, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        let seqs: Vec<i64> = sqlx::query_scalar(pick)
            .bind(i64::try_from(batch.limit).unwrap_or(i64::MAX))
            .fetch_all(&mut *tx)
            .await?;
        if seqs.is_empty() {
            tx.rollback().await?;
            return Ok(Vec::new());
        }
        let mut update = self.sql.claim_update.clone();
        let mut args = MySqlArguments::default();
        args.add(batch.claim).map_err(sqlx::Error::Encode)?;
        args.add(micros(batch.lease)).map_err(sqlx::Error::Encode)?;
        in_list_after::<MySql>(&mut update, &mut args, &seqs)
            .map_err(|error| sqlx::Error::Encode(error.to_string().into()))?;
        sqlx::query_with(&update, args).execute(&mut *tx).await?;
        let rows: Vec<ClaimedRow> = sqlx::query_as(&self.sql.claim_read)
            .bind(batch.claim)
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(rows)
    }
}

/// Claims by a locking read and an update in one short transaction; no wake-ups (relays poll);
/// statements chosen as a deadlock's victim run again.
impl OutboxSteps for MySql {
    const HOST_CLOCK: bool = false;

    fn statements(table: &str) -> OutboxSql {
        statements(table)
    }

    /// Serialized by a named lock (MySQL's DDL is not transactional).
    async fn migrate_table(pool: &MySqlPool, table: &str, steps: &Steps) -> Result<(), StoreError> {
        idempotency_sql::support::migrate_mysql_table(pool, table, steps, None).await?;
        Ok(())
    }

    /// Picks the batch with a locking read, claims it, reads it back: one short transaction,
    /// run again if InnoDB picks it as a deadlock's victim.
    async fn claim(outbox: &Outbox<Self>, batch: ClaimBatch) -> Result<Vec<Claimed>, StoreError> {
        let pick = if outbox.skips_locked().await? {
            format!("{} SKIP LOCKED", outbox.sql.claim)
        } else {
            outbox.sql.claim.clone()
        };
        let rows = retry_deadlocks(|| outbox.claim_once(batch, &pick)).await?;
        Ok(claimed(rows, batch.claim))
    }

    async fn purge_place(outbox: &Outbox<Self>) -> Result<PurgePlace, StoreError> {
        Ok(PurgePlace {
            quote: ("`", "`"),
            now: "UTC_TIMESTAMP(6)",
            lock: if outbox.skips_locked().await? {
                " FOR UPDATE SKIP LOCKED"
            } else {
                " FOR UPDATE"
            },
            begin: None,
        })
    }

    fn retryable(error: &sqlx::Error) -> bool {
        is_error(error, DEADLOCK)
    }
}

#[cfg(test)]
mod tests {
    use super::has_skip_locked;

    #[test]
    fn skip_locked_by_server_version() {
        assert!(has_skip_locked("10.11.19-MariaDB-0+deb12u1"));
        assert!(has_skip_locked("10.6.0-MariaDB"));
        assert!(!has_skip_locked("10.5.22-MariaDB-log"));
        assert!(has_skip_locked("8.0.36"));
        assert!(has_skip_locked("8.4.0-log"));
        assert!(!has_skip_locked("8.0.0"));
        assert!(!has_skip_locked("5.7.44"));
    }
}
