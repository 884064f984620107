//! The MySQL/MariaDB store: `INSERT … ON DUPLICATE KEY UPDATE` with conditional takeover.

use std::borrow::Cow;
use std::sync::OnceLock;
use std::time::Duration;

use sqlx::{MySql, MySqlConnection};

use super::common::{ClaimRow, map_err, micros, token_param};
use super::conflicts::MarkSql;
use super::dialect::sealed::{Param, Param::*, Steps};
use super::dialect::{SqlStore, TableSql};
use super::schema::{self, VersionSql, Versions};
use super::tx::{TxClaim, TxClaimRequest, still_running, store_request, tx_claim};
use idempotency_core::{Claim, ClaimRequest, FencingToken, Lease, StorageKey, StoreError};

/// MySQL's error number for a lock wait that ran out (`innodb_lock_wait_timeout`).
const LOCK_WAIT_TIMEOUT: u16 = 1205;

/// The schema versions table on MySQL/MariaDB.
const VERSIONS: VersionSql = VersionSql {
    create: "CREATE TABLE IF NOT EXISTS idempotency_schema (table_name VARCHAR(64) NOT NULL \
             PRIMARY KEY, version BIGINT NOT NULL, migrated_at DATETIME(6) NOT NULL \
             DEFAULT CURRENT_TIMESTAMP(6)) ENGINE = InnoDB",
    read: "SELECT version FROM idempotency_schema WHERE table_name = ?",
    exists: "SELECT CAST(1 AS SIGNED) FROM information_schema.tables \
             WHERE table_schema = DATABASE() AND table_name = ?",
    write: "REPLACE INTO idempotency_schema (table_name, version, migrated_at) \
            VALUES (?, ?, UTC_TIMESTAMP(6))",
    add_ttl: "ALTER TABLE idempotency_schema ADD COLUMN record_ttl_us BIGINT NULL",
    write_ttl: "UPDATE idempotency_schema SET record_ttl_us = ? WHERE table_name = ?",
    read_ttl: "SELECT record_ttl_us FROM idempotency_schema WHERE table_name = ?",
};

/// Brings `table` to the latest version of `steps` under a named lock (MySQL's DDL is not
/// transactional), record tables and outbox tables alike; the connection it used.
pub async fn migrate_table(
    pool: &sqlx::MySqlPool,
    table: &str,
    steps: &schema::Steps,
    ttl: Option<Duration>,
) -> Result<sqlx::pool::PoolConnection<MySql>, StoreError> {
    let lock = format!("idempotency-migrate:{table}");
    let mut conn = pool.acquire().await.map_err(map_err)?;
    let (locked,): (Option<i64>,) = sqlx::query_as("SELECT GET_LOCK(?, 60)")
        .bind(&lock)
        .fetch_one(&mut *conn)
        .await
        .map_err(map_err)?;
    if locked != Some(1) {
        return Err(StoreError::Backend(
            format!("could not take the migration lock {lock:?} within 60 s").into(),
        ));
    }
    let migrated = MySql::VERSIONS.migrate(&mut conn, table, steps, ttl).await;
    let released = sqlx::query("SELECT RELEASE_LOCK(?)")
        .bind(&lock)
        .execute(&mut *conn)
        .await
        .map_err(map_err);
    migrated?;
    released?;
    Ok(conn)
}

/// How often a claim tries again after losing a race (a row that changed between statements).
const CLAIM_ROUNDS: usize = 8;

const NOW: &str = "UTC_TIMESTAMP(6)";
const NOW_US: &str = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))";

/// A [`Store`](idempotency_core::Store) on MySQL 8 or MariaDB 10.5+ (sqlx), also usable inside the
/// caller's transactions ([`TxStore`](super::TxStore)); settings and `migrate` on
/// [`SqlStore`].
///
/// - **Clock**: lease and TTL comparisons use the database clock (`UTC_TIMESTAMP(6)`, constant
///   within a statement), operations' (purge, counts, listings) too; columns are `DATETIME(6)`
///   in UTC.
/// - **Statements**: [`claim`](idempotency_core::Store::claim) first reads the row without locking it: a replay,
///   an in-flight answer or a mismatch is that **one** statement (no row lock, so a storm of
///   duplicates of one key does not queue). An absent or expired key is then claimed by one
///   `INSERT … ON DUPLICATE KEY UPDATE` whose update takes an expired row over and leaves a
///   live one untouched; `LAST_INSERT_ID(expr)` reports the new fencing token (0 when nothing
///   was taken): **two** statements for a new key, three for a takeover or a lost race.
///   Inside a transaction ([`TxStore`](super::TxStore)) the upsert comes first (it must wait on a concurrent
///   claimer's row), then a `FOR UPDATE` read unless it inserted. Other steps are one
///   statement.
/// - **Fencing tokens**: `GREATEST(previous + 1, now in µs)` from the database clock, so they
///   grow across releases, expiries and restarts unless that clock steps back.
/// - **Transactions**: the upsert waits on a concurrent claimer's uncommitted row (the primary
///   key), so the second transaction replays the first one's committed outcome, or executes if
///   it rolled back. When an owner rolls back while many duplicates wait on its row, InnoDB
///   reports deadlocks (1213) among the waiters (about 18 of 50 in
///   `tx_owner_rollback_under_storm`): those transactions are rolled back whole, nothing ran
///   twice, and the claim returns a transient [`StoreError::Backend`]; retry the transaction.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use idempotency_sql::MySqlStore;
/// let pool = sqlx::MySqlPool::connect("mysql://root@127.0.0.1:3306/test").await?;
/// let store = MySqlStore::new(pool);
/// store.migrate().await?;
/// # Ok(()) }
/// ```
pub type MySqlStore = SqlStore<MySql>;

/// MySQL's own statements, built once per table name.
pub struct Sql {
    upsert: String,
    /// Whether the server is MariaDB (`SET STATEMENT` bounds a claim's wait), read once.
    mariadb: OnceLock<bool>,
    read: String,
    read_locked: String,
}

/// The statements of `table`.
fn statements(table: &str) -> TableSql<Sql> {
    {
        let t = format!("`{table}`");
        let expired = format!("expires_at <= {NOW}");
        let us = |column: &str| {
            format!("TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {column}) AS {column}")
        };
        let record_columns = format!(
            "key_hash, namespace, fingerprint, state, token, attempts, {}, {}, {}, {}, \
             response_status, response_body, conflicts, {}, mechanism, key_derivation, progress",
            us("created_at").replace("AS created_at", "AS created_us"),
            us("updated_at").replace("AS updated_at", "AS updated_us"),
            us("completed_at").replace("AS completed_at", "AS completed_us"),
            us("expires_at").replace("AS expires_at", "AS expires_us"),
            us("last_conflict_at").replace("AS last_conflict_at", "AS last_conflict_us"),
        );
        let read = format!(
            "SELECT state, fingerprint, token, attempts, \
             TIMESTAMPDIFF(MICROSECOND, {NOW}, expires_at) AS remaining_us, response_status, \
             response_body FROM {t} WHERE key_hash = ?"
        );
        let owned = "key_hash = ? AND token = ? AND state = 'in_progress'";
        let marks = MarkSql::new(&t, "ADD COLUMN", "DATETIME(6)", NOW, "?");
        TableSql {
            own: Sql {
                mariadb: OnceLock::new(),
                // Assignments of ON DUPLICATE KEY UPDATE run left to right and see earlier ones, so
                // every column the condition or a later value reads (`state`, `expires_at`) is
                // assigned after its readers. Parameters: key, namespace, fingerprint, claim id,
                // lease µs, mechanism, key derivation, namespace, fingerprint, claim id,
                // mechanism, key derivation, lease µs.
                upsert: format!(
                    "INSERT INTO {t} (key_hash, namespace, fingerprint, state, token, claim_id, \
                   attempts, created_at, updated_at, expires_at, mechanism, key_derivation) \
                 VALUES (?, ?, ?, 'in_progress', LAST_INSERT_ID({NOW_US}), ?, 1, {NOW}, {NOW}, \
                   {NOW} + INTERVAL ? MICROSECOND, ?, ?) \
                 ON DUPLICATE KEY UPDATE \
                   attempts = IF({expired}, IF(state = 'in_progress', attempts + 1, 1), attempts), \
                   created_at = IF({expired}, IF(state = 'in_progress', created_at, {NOW}), \
                     created_at), \
                   progress = IF({expired}, IF(state = 'in_progress', progress, NULL), progress), \
                   token = IF({expired}, LAST_INSERT_ID(GREATEST(token + 1, {NOW_US})), \
                     token + LAST_INSERT_ID(0)), \
                   namespace = IF({expired}, ?, namespace), \
                   fingerprint = IF({expired}, ?, fingerprint), \
                   claim_id = IF({expired}, ?, claim_id), \
                   mechanism = IF({expired}, ?, mechanism), \
                   key_derivation = IF({expired}, ?, key_derivation), \
                   state = IF({expired}, 'in_progress', state), \
                   updated_at = IF({expired}, {NOW}, updated_at), \
                   completed_at = IF({expired}, NULL, completed_at), \
                   response_status = IF({expired}, NULL, response_status), \
                   response_body = IF({expired}, NULL, response_body), \
                   conflicts = IF({expired}, 0, conflicts), \
                   last_conflict_at = IF({expired}, NULL, last_conflict_at), \
                   expires_at = IF({expired}, {NOW} + INTERVAL ? MICROSECOND, expires_at)"
                ),
                read_locked: format!("{read} FOR UPDATE"),
                read,
            },
            complete: format!(
                "UPDATE {t} SET state = 'completed', response_status = ?, response_body = ?, \
                 completed_at = {NOW}, updated_at = {NOW}, \
                 expires_at = {NOW} + INTERVAL ? MICROSECOND WHERE {owned}"
            ),
            touch: format!(
                "UPDATE {t} SET expires_at = {NOW} + INTERVAL ? MICROSECOND, updated_at = {NOW} \
                 WHERE {owned}"
            ),
            // The lease is renewed only once half of it is spent: otherwise the indexed
            // `expires_at` and `updated_at` keep their values and no index entry is rewritten.
            // Assignments run left to right: `updated_at` reads `expires_at` before it changes.
            checkpoint: format!(
                "UPDATE {t} SET progress = ?, \
                 updated_at = IF(expires_at < {NOW} + INTERVAL (? DIV 2) MICROSECOND, {NOW}, \
                   updated_at), \
                 expires_at = IF(expires_at < {NOW} + INTERVAL (? DIV 2) MICROSECOND, \
                   {NOW} + INTERVAL ? MICROSECOND, expires_at) \
                 WHERE {owned}"
            ),
            resume: format!(
                "UPDATE {t} SET expires_at = created_at, attempts = 1, updated_at = {NOW} \
                 WHERE {owned}"
            ),
            expire: format!(
                "UPDATE {t} SET expires_at = created_at WHERE key_hash = ? AND state = 'in_progress'"
            ),
            // Completed past the TTL, or an abandoned lease past its end plus the grace;
            // last written at least the table's configured TTL ago.
            purge: format!(
                "DELETE FROM {t} WHERE expires_at <= {NOW} AND (state = 'completed' OR \
                 expires_at <= {NOW} - INTERVAL ? MICROSECOND) \
                 AND updated_at <= {NOW} - INTERVAL ? MICROSECOND ORDER BY expires_at LIMIT ?"
            ),
            steps: vec![
                vec![format!(
                    "CREATE TABLE IF NOT EXISTS {t} (\
                   key_hash BINARY(32) NOT NULL PRIMARY KEY, \
                   namespace VARCHAR(255) NOT NULL, \
                   fingerprint BINARY(32) NOT NULL, \
                   state VARCHAR(16) NOT NULL, \
                   token BIGINT NOT NULL, \
                   attempts INT NOT NULL, \
                   created_at DATETIME(6) NOT NULL, \
                   updated_at DATETIME(6) NOT NULL, \
                   completed_at DATETIME(6) NULL, \
                   expires_at DATETIME(6) NOT NULL, \
                   response_status INT NULL, \
                   response_body LONGBLOB NULL, \
                   KEY `{table}_expires_idx` (expires_at), \
                   KEY `{table}_reconcile_idx` (namespace, state, updated_at)\
                 ) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4"
                )],
                vec![
                    // 2: the claimer's id of an in-progress claim (`undo_claim`).
                    format!("ALTER TABLE {t} ADD COLUMN claim_id BINARY(16) NULL"),
                ],
                // 3: the conflict mark (`mark_conflict`).
                marks.step,
                vec![
                    // 4: what wrote the record (`Record::mechanism`, `Record::key_derivation`).
                    format!("ALTER TABLE {t} ADD COLUMN mechanism VARCHAR(16) NULL"),
                    format!("ALTER TABLE {t} ADD COLUMN key_derivation SMALLINT NULL"),
                ],
                // 5: the checkpoints of a run with steps (`Record::progress`).
                vec![format!(
                    "ALTER TABLE {t} ADD COLUMN progress MEDIUMBLOB NULL"
                )],
                // 6: nothing on MySQL (PostgreSQL's waiter flag: MySQL has no `NOTIFY`).
                vec![],
                // 7: nothing on MySQL (PostgreSQL drops its `CHECK` on `state`: none here).
                vec![],
            ],
            mark_conflict: marks.mark,
            undo: format!(
                "DELETE FROM {t} WHERE key_hash = ? AND claim_id = ? AND state = 'in_progress'"
            ),
            release: format!("DELETE FROM {t} WHERE {owned}"),
            delete: format!("DELETE FROM {t} WHERE key_hash = ? AND token = ?"),
            get: format!("SELECT {record_columns} FROM {t} WHERE key_hash = ?"),
            select_records: format!("SELECT {record_columns} FROM {t} WHERE 1 = 1"),
        }
    }
}

/// Why a claim gave up: its bounded wait ran out, or anything else.
enum Waited {
    /// A lock wait ran out (`innodb_lock_wait_timeout`): another claimer is still running.
    Out,
    /// Any other failure.
    Failed(StoreError),
}

impl From<StoreError> for Waited {
    fn from(error: StoreError) -> Self {
        Self::Failed(error)
    }
}

impl From<sqlx::Error> for Waited {
    fn from(error: sqlx::Error) -> Self {
        let ran_out = error.as_database_error().is_some_and(|db| {
            db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                .is_some_and(|my| my.number() == LOCK_WAIT_TIMEOUT)
        });
        if ran_out {
            Self::Out
        } else {
            Self::Failed(map_err(error))
        }
    }
}

/// What the upsert did.
enum Upsert {
    /// Inserted a fresh record: attempt 1.
    Inserted(FencingToken),
    /// Took an expired record over (attempt count to be read).
    TookOver(FencingToken),
    /// A live record holds the key.
    Live,
}

impl Steps for MySql {
    type Own = Sql;

    const LIST_TIME: (&'static str, &'static str) =
        ("TIMESTAMPADD(MICROSECOND, ", ", '1970-01-01 00:00:00')");

    const QUOTE: (&'static str, &'static str) = ("`", "`");
    const LOCK_ROWS: &'static str = " FOR UPDATE SKIP LOCKED";
    const NOW: &'static str = NOW;
    const CLOCK_MINUS: Option<(&'static str, &'static str)> =
        Some(("TIMESTAMPADD(MICROSECOND, -", ", UTC_TIMESTAMP(6))"));
    const SERIAL_KEY: &'static str = "BIGINT AUTO_INCREMENT PRIMARY KEY";
    const MICROS: (&'static str, &'static str) =
        ("TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', ", ")");
    const VERSIONS: Versions<Self> = Versions::new(&VERSIONS);
    const COMPLETE: &'static [Param] = &[Status, Body, Span, Key, Token];
    const TOUCH: &'static [Param] = &[Span, Key, Token];
    const CHECKPOINT: &'static [Param] = &[Body, Span, Span, Span, Key, Token];
    const PURGE: &'static [Param] = &[Grace, Floor, Limit];

    fn statements(table: &str) -> TableSql<Sql> {
        statements(table)
    }

    async fn hold_on(
        conn: &mut MySqlConnection,
        table: &str,
        key: &StorageKey,
    ) -> Result<bool, StoreError> {
        let (held,): (Option<i64>,) = sqlx::query_as("SELECT GET_LOCK(?, 0)")
            .bind(crate::steps::lock_name(table, key))
            .fetch_one(conn)
            .await
            .map_err(map_err)?;
        Ok(held == Some(1))
    }

    /// `GET_LOCK` with a timeout (seconds, with a fraction).
    async fn hold_waiting_on(
        conn: &mut MySqlConnection,
        table: &str,
        key: &StorageKey,
        wait: Duration,
    ) -> Result<bool, StoreError> {
        let (held,): (Option<i64>,) = sqlx::query_as("SELECT GET_LOCK(?, ?)")
            .bind(crate::steps::lock_name(table, key))
            .bind(wait.as_secs_f64().max(0.001))
            .fetch_one(conn)
            .await
            .map_err(map_err)?;
        Ok(held == Some(1))
    }

    async fn unhold_on(
        conn: &mut MySqlConnection,
        table: &str,
        key: &StorageKey,
    ) -> Result<(), StoreError> {
        sqlx::query("DO RELEASE_LOCK(?)")
            .bind(crate::steps::lock_name(table, key))
            .execute(conn)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    #[cfg(feature = "testing")]
    fn own_statement<'a>(own: &'a Sql, name: &str) -> Option<&'a str> {
        match name {
            "upsert" => Some(&own.upsert),
            "read" => Some(&own.read),
            _ => None,
        }
    }

    async fn migrate(store: &MySqlStore) -> Result<(), StoreError> {
        let ttl = store.settings.table_ttl;
        let mut conn =
            migrate_table(&store.pool, store.table_name(), &store.sql.steps, ttl).await?;
        store.sql.own.is_mariadb(&mut conn).await?;
        Ok(())
    }

    /// The upsert first, its wait on a concurrent claimer's row bounded by `SET STATEMENT
    /// innodb_lock_wait_timeout` on MariaDB (whole seconds; 0 rejects at once); on MySQL the
    /// session's timeout applies. A wait that ran out is in flight.
    async fn claim_in_tx_on(
        store: &MySqlStore,
        conn: &mut MySqlConnection,
        request: TxClaimRequest<'_>,
    ) -> Result<TxClaim, StoreError> {
        let sql = &store.sql.own;
        let upsert = if sql.is_mariadb(conn).await? {
            let secs = request.in_flight.max_wait().as_secs();
            Cow::Owned(format!(
                "SET STATEMENT innodb_lock_wait_timeout = {secs} FOR {}",
                sql.upsert
            ))
        } else {
            Cow::Borrowed(sql.upsert.as_str())
        };
        let claim = store_request(&request);
        match sql.claim_with(conn, claim, true, &upsert).await {
            Ok(claimed) => Ok(tx_claim(claimed, &request)),
            Err(Waited::Out) => Ok(still_running()),
            Err(Waited::Failed(error)) => Err(error),
        }
    }

    /// A consistent read first, then the upsert.
    async fn claim_on(
        store: &MySqlStore,
        conn: &mut MySqlConnection,
        request: ClaimRequest<'_>,
    ) -> Result<Claim, StoreError> {
        let sql = &store.sql.own;
        sql.claim_with(conn, request, false, &sql.upsert)
            .await
            .map_err(|waited| match waited {
                Waited::Out => StoreError::Backend("lock wait timeout exceeded".to_owned().into()),
                Waited::Failed(error) => error,
            })
    }
}

impl Sql {
    /// Whether the server is MariaDB, asked once.
    async fn is_mariadb(&self, conn: &mut MySqlConnection) -> Result<bool, StoreError> {
        if let Some(mariadb) = self.mariadb.get() {
            return Ok(*mariadb);
        }
        let (version,): (String,) = sqlx::query_as("SELECT VERSION()")
            .fetch_one(conn)
            .await
            .map_err(map_err)?;
        Ok(*self.mariadb.get_or_init(|| version.contains("MariaDB")))
    }

    async fn upsert(
        &self,
        conn: &mut MySqlConnection,
        request: ClaimRequest<'_>,
        statement: &str,
    ) -> Result<Upsert, Waited> {
        let lease = micros(request.lease);
        let claim_id = request.claim_id.as_bytes().as_slice();
        let mechanism = request.mechanism.map(idempotency_core::Mechanism::as_str);
        let key_derivation = request.key_derivation.map(i16::from);
        let done = sqlx::query(statement)
            .bind(request.key.0.as_slice())
            .bind(request.namespace)
            .bind(request.fingerprint.0.as_slice())
            .bind(claim_id)
            .bind(lease)
            .bind(mechanism)
            .bind(key_derivation)
            .bind(request.namespace)
            .bind(request.fingerprint.0.as_slice())
            .bind(claim_id)
            .bind(mechanism)
            .bind(key_derivation)
            .bind(lease)
            .execute(conn)
            .await
            .map_err(Waited::from)?;
        let token = FencingToken::new(done.last_insert_id());
        Ok(match (token.get(), done.rows_affected()) {
            (0, _) => Upsert::Live,
            (_, 1) => Upsert::Inserted(token),
            _ => Upsert::TookOver(token),
        })
    }

    /// Reads the row for a claim answer (`locked` inside a transaction: the latest version).
    async fn read(
        &self,
        conn: &mut MySqlConnection,
        key: &StorageKey,
        locked: bool,
    ) -> Result<Option<ClaimRow>, StoreError> {
        let sql = if locked {
            &self.read_locked
        } else {
            &self.read
        };
        sqlx::query_as(sql)
            .bind(key.0.as_slice())
            .fetch_optional(conn)
            .await
            .map_err(map_err)
    }

    /// Claims the key with `upsert` (`locked` inside a transaction: the upsert first, then
    /// locking reads).
    async fn claim_with(
        &self,
        conn: &mut MySqlConnection,
        request: ClaimRequest<'_>,
        locked: bool,
        upsert: &str,
    ) -> Result<Claim, Waited> {
        // Outside a transaction, a consistent read first: replays and in-flight answers take no
        // row lock, so a storm of duplicates of one key does not queue on it.
        if !locked
            && let Some(row) = self.read(conn, request.key, false).await?
            && row.remaining_us > 0
        {
            return Ok(row.into_claim(request.fingerprint)?);
        }
        for _ in 0..CLAIM_ROUNDS {
            match self.upsert(conn, request, upsert).await? {
                Upsert::Inserted(token) => {
                    return Ok(Claim::Acquired(Lease {
                        token,
                        attempt: 1,
                        took_over: false,
                    }));
                }
                Upsert::TookOver(token) => {
                    let row = self.read(conn, request.key, locked).await?;
                    let attempts = row
                        .filter(|row| row.token == token_param(token).unwrap_or(-1))
                        .map_or(2, |row| row.attempts);
                    return Ok(Claim::Acquired(Lease {
                        token,
                        attempt: u32::try_from(attempts).unwrap_or(u32::MAX),
                        took_over: attempts > 1,
                    }));
                }
                Upsert::Live => match self.read(conn, request.key, locked).await? {
                    Some(row) if row.remaining_us > 0 => {
                        return Ok(row.into_claim(request.fingerprint)?);
                    }
                    // Released or expired since the upsert: claim again.
                    _ => continue,
                },
            }
        }
        Err(Waited::Failed(StoreError::Backend(
            format!("claim lost {CLAIM_ROUNDS} races in a row on one key").into(),
        )))
    }
}
