//! The SQLite store: an upsert with `RETURNING` to claim, plain reads to replay.

use std::time::{Duration, SystemTime};

use sqlx::{Sqlite, SqliteConnection};

use super::common::{ClaimRow, map_err, micros, unix_micros};
use super::conflicts::MarkSql;
use super::dialect::sealed::{Param, Param::*, Steps};
use super::dialect::{SqlStore, TableSql};
use super::schema::{self, VersionSql, Versions};
use super::tx::{TxClaim, TxClaimRequest, store_request, tx_claim};
use idempotency_core::{Claim, ClaimRequest, FencingToken, Lease, StoreError};

/// The schema versions table on SQLite.
const VERSIONS: VersionSql = VersionSql {
    create: "CREATE TABLE IF NOT EXISTS idempotency_schema (table_name TEXT PRIMARY KEY, \
             version INTEGER NOT NULL, migrated_at INTEGER NOT NULL DEFAULT (unixepoch()))",
    read: "SELECT version FROM idempotency_schema WHERE table_name = ?1",
    exists: "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
    write: "INSERT OR REPLACE INTO idempotency_schema (table_name, version) VALUES (?1, ?2)",
    add_ttl: "ALTER TABLE idempotency_schema ADD COLUMN record_ttl_us INTEGER",
    write_ttl: "UPDATE idempotency_schema SET record_ttl_us = ?1 WHERE table_name = ?2",
    read_ttl: "SELECT record_ttl_us FROM idempotency_schema WHERE table_name = ?1",
};

/// How often a claim re-reads after losing a race (a row that changed between two statements).
const CLAIM_ROUNDS: usize = 8;

/// Brings `table` to the latest version of `steps` in one `BEGIN IMMEDIATE` transaction, which
/// serializes migrations (record tables and outbox tables alike).
pub async fn migrate_table(
    pool: &sqlx::SqlitePool,
    table: &str,
    steps: &schema::Steps,
    ttl: Option<Duration>,
) -> Result<(), StoreError> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.map_err(map_err)?;
    Sqlite::VERSIONS.migrate(&mut tx, table, steps, ttl).await?;
    tx.commit().await.map_err(map_err)
}

/// A [`Store`](idempotency_core::Store) on SQLite (sqlx), also usable inside the caller's transactions
/// ([`TxStore`](super::TxStore)); settings and `migrate` on [`SqlStore`].
///
/// - **Clock**: SQLite is embedded, so times are the host clock in microseconds, read once per
///   call and passed to the statement (columns hold Unix microseconds).
/// - **Statements**: [`claim`](idempotency_core::Store::claim) reads first (a replay or an in-flight answer is
///   one read, which never waits for writers in WAL mode), then claims an absent or expired
///   key with one `INSERT … ON CONFLICT DO UPDATE … WHERE expired RETURNING` (two statements
///   for a new key; a lost race reads again). Other steps are one statement.
/// - **Fencing tokens**: `max(previous + 1, now in µs)`, so they grow across releases,
///   expiries and restarts as long as the host clock does not step back.
/// - **Transactions**: SQLite has one writer at a time. A transactional claim writes first,
///   so it waits (busy timeout) for a concurrent claimer's transaction to end, then replays its
///   outcome. Claim before reading anything else in the transaction (or begin it with
///   `BEGIN IMMEDIATE`), else SQLite may refuse the upgrade with `SQLITE_BUSY`.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use idempotency_sql::SqliteStore;
/// let pool = sqlx::SqlitePool::connect("sqlite://dedup.db?mode=rwc").await?;
/// let store = SqliteStore::new(pool);
/// store.migrate().await?;
/// # Ok(()) }
/// ```
pub type SqliteStore = SqlStore<Sqlite>;

/// SQLite's own statements, built once per table name.
pub struct Sql {
    read: String,
    upsert: String,
}

/// The statements of `table`.
fn statements(table: &str) -> TableSql<Sql> {
    {
        let t = format!("\"{table}\"");
        let owned = "key_hash = ?1 AND token = ?2 AND state = 'in_progress'";
        let record_columns = "key_hash, namespace, fingerprint, state, token, attempts, \
             created_at AS created_us, updated_at AS updated_us, completed_at AS completed_us, \
             expires_at AS expires_us, response_status, response_body, conflicts, \
             last_conflict_at AS last_conflict_us, mechanism, key_derivation, progress";
        let now = <Sqlite as Steps>::NOW;
        let marks = MarkSql::new(&t, "ADD COLUMN", "INTEGER", now, "?1");
        TableSql {
            own: Sql {
                read: format!(
                    "SELECT state, fingerprint, token, attempts, expires_at - ?2 AS remaining_us, \
                 response_status, response_body FROM {t} WHERE key_hash = ?1"
                ),
                // ?4 is now in µs; a fresh token is `now`, a takeover's `max(previous + 1, now)`.
                upsert: format!(
                    "INSERT INTO {t} (key_hash, namespace, fingerprint, state, token, claim_id, \
                   attempts, created_at, updated_at, expires_at, mechanism, key_derivation) \
                 VALUES (?1, ?2, ?3, 'in_progress', ?4, ?6, 1, ?4, ?4, ?4 + ?5, ?7, ?8) \
                 ON CONFLICT (key_hash) DO UPDATE SET \
                   namespace = excluded.namespace, fingerprint = excluded.fingerprint, \
                   claim_id = excluded.claim_id, mechanism = excluded.mechanism, \
                   key_derivation = excluded.key_derivation, \
                   state = 'in_progress', token = max(token + 1, excluded.token), \
                   attempts = CASE WHEN state = 'in_progress' THEN attempts + 1 ELSE 1 END, \
                   created_at = CASE WHEN state = 'in_progress' THEN created_at \
                     ELSE excluded.created_at END, \
                   progress = CASE WHEN state = 'in_progress' THEN progress ELSE NULL END, \
                   updated_at = excluded.updated_at, completed_at = NULL, \
                   expires_at = excluded.expires_at, response_status = NULL, \
                   response_body = NULL, conflicts = 0, last_conflict_at = NULL \
                 WHERE expires_at <= excluded.updated_at \
                 RETURNING token, attempts"
                ),
            },
            complete: format!(
                "UPDATE {t} SET state = 'completed', response_status = ?3, response_body = ?4, \
                 completed_at = ?5, updated_at = ?5, expires_at = ?5 + ?6 WHERE {owned}"
            ),
            touch: format!("UPDATE {t} SET expires_at = ?3 + ?4, updated_at = ?3 WHERE {owned}"),
            checkpoint: format!(
                "UPDATE {t} SET progress = ?5, expires_at = ?3 + ?4, updated_at = ?3 WHERE {owned}"
            ),
            resume: format!(
                "UPDATE {t} SET expires_at = created_at, attempts = 1, updated_at = {now} \
                 WHERE {owned}"
            ),
            expire: format!(
                "UPDATE {t} SET expires_at = created_at WHERE key_hash = ?1 AND state = 'in_progress'"
            ),
            purge: format!(
                "DELETE FROM {t} WHERE key_hash IN (\
                   SELECT key_hash FROM {t} WHERE expires_at <= ?1 \
                   AND (state = 'completed' OR expires_at <= ?1 - ?3) AND updated_at <= ?1 - ?4 \
                   ORDER BY expires_at LIMIT ?2)"
            ),
            steps: vec![
                vec![
                    format!(
                        "CREATE TABLE IF NOT EXISTS {t} (\
                       key_hash BLOB NOT NULL PRIMARY KEY, \
                       namespace TEXT NOT NULL, \
                       fingerprint BLOB NOT NULL, \
                       state TEXT NOT NULL CHECK (state IN ('in_progress', 'completed')), \
                       token INTEGER NOT NULL, \
                       attempts INTEGER NOT NULL, \
                       created_at INTEGER NOT NULL, \
                       updated_at INTEGER NOT NULL, \
                       completed_at INTEGER, \
                       expires_at INTEGER NOT NULL, \
                       response_status INTEGER, \
                       response_body BLOB) WITHOUT ROWID"
                    ),
                    format!(
                        "CREATE INDEX IF NOT EXISTS \"{table}_expires_idx\" ON {t} (expires_at)"
                    ),
                    format!(
                        "CREATE INDEX IF NOT EXISTS \"{table}_reconcile_idx\" \
                     ON {t} (namespace, state, updated_at)"
                    ),
                ],
                vec![
                    // 2: the claimer's id of an in-progress claim (`undo_claim`).
                    format!("ALTER TABLE {t} ADD COLUMN claim_id BLOB"),
                ],
                // 3: the conflict mark (`mark_conflict`).
                marks.step,
                vec![
                    // 4: what wrote the record (`Record::mechanism`, `Record::key_derivation`).
                    format!("ALTER TABLE {t} ADD COLUMN mechanism TEXT"),
                    format!("ALTER TABLE {t} ADD COLUMN key_derivation INTEGER"),
                ],
                // 5: the checkpoints of a run with steps (`Record::progress`).
                vec![format!("ALTER TABLE {t} ADD COLUMN progress BLOB")],
                // 6: nothing on SQLite (PostgreSQL's waiter flag: waiters share the process).
                vec![],
                // 7: nothing on SQLite (PostgreSQL drops its `CHECK` on `state`; SQLite's is
                // compiled into each prepared statement, and costs nothing measurable).
                vec![],
            ],
            mark_conflict: marks.mark,
            undo: format!(
                "DELETE FROM {t} WHERE key_hash = ?1 AND claim_id = ?2 AND state = 'in_progress'"
            ),
            release: format!("DELETE FROM {t} WHERE {owned}"),
            delete: format!("DELETE FROM {t} WHERE key_hash = ?1 AND token = ?2"),
            get: format!("SELECT {record_columns} FROM {t} WHERE key_hash = ?1"),
            select_records: format!("SELECT {record_columns} FROM {t} WHERE 1 = 1"),
        }
    }
}

fn now_us() -> i64 {
    unix_micros(SystemTime::now())
}

impl Steps for Sqlite {
    type Own = Sql;

    const LIST_TIME: (&'static str, &'static str) = ("", "");

    /// The write lock is the database's, taken by the purge's `BEGIN IMMEDIATE`.
    const LOCK_ROWS: &'static str = "";
    /// Unix microseconds, as the record table's time columns.
    const NOW: &'static str = "CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)";
    const SERIAL_KEY: &'static str = "INTEGER PRIMARY KEY AUTOINCREMENT";
    /// Time columns hold Unix microseconds already.
    const MICROS: (&'static str, &'static str) = ("", "");

    /// `BEGIN IMMEDIATE`, so the transaction holds the write lock from its start (waiting for
    /// it up to the busy timeout) and its claim is never refused.
    const BEGIN: Option<&'static str> = Some("BEGIN IMMEDIATE");

    const VERSIONS: Versions<Self> = Versions::new(&VERSIONS);
    const COMPLETE: &'static [Param] = &[Key, Token, Status, Body, HostNow, Span];
    const TOUCH: &'static [Param] = &[Key, Token, HostNow, Span];
    const CHECKPOINT: &'static [Param] = &[Key, Token, HostNow, Span, Body];
    const PURGE: &'static [Param] = &[HostNow, Limit, Grace, Floor];

    fn statements(table: &str) -> TableSql<Sql> {
        statements(table)
    }

    const HOLD_ENDS_WITH_CONNECTION: bool = false;

    async fn hold_on(
        _conn: &mut SqliteConnection,
        table: &str,
        key: &idempotency_core::StorageKey,
    ) -> Result<bool, StoreError> {
        Ok(crate::steps::in_process::take(table, key))
    }

    /// Holds are kept in the process: a waiter polls instead.
    async fn hold_waiting_on(
        _conn: &mut SqliteConnection,
        _table: &str,
        _key: &idempotency_core::StorageKey,
        _wait: Duration,
    ) -> Result<bool, StoreError> {
        Ok(false)
    }

    async fn unhold_on(
        _conn: &mut SqliteConnection,
        table: &str,
        key: &idempotency_core::StorageKey,
    ) -> Result<(), StoreError> {
        crate::steps::in_process::give_back(table, key);
        Ok(())
    }

    #[cfg(feature = "testing")]
    fn own_statement<'a>(own: &'a Sql, name: &str) -> Option<&'a str> {
        match name {
            "read" => Some(&own.read),
            "upsert" => Some(&own.upsert),
            _ => None,
        }
    }

    /// Runs the schema steps in one `BEGIN IMMEDIATE` transaction, which serializes them.
    async fn migrate(store: &SqliteStore) -> Result<(), StoreError> {
        let ttl = store.settings.table_ttl;
        migrate_table(&store.pool, store.table_name(), &store.sql.steps, ttl).await
    }

    /// SQLite only waits (for the write lock, at `BEGIN IMMEDIATE` or at the claim's write, up
    /// to the busy timeout).
    async fn claim_in_tx_on(
        store: &SqliteStore,
        conn: &mut SqliteConnection,
        request: TxClaimRequest<'_>,
    ) -> Result<TxClaim, StoreError> {
        let claim = store_request(&request);
        Ok(tx_claim(
            store.sql.own.claim(conn, claim, true).await?,
            &request,
        ))
    }

    async fn claim_on(
        store: &SqliteStore,
        conn: &mut SqliteConnection,
        request: ClaimRequest<'_>,
    ) -> Result<Claim, StoreError> {
        store.sql.own.claim(conn, request, false).await
    }
}

impl Sql {
    /// The live record's answer, if the key holds one.
    async fn read_live(
        &self,
        conn: &mut SqliteConnection,
        request: ClaimRequest<'_>,
    ) -> Result<Option<Claim>, StoreError> {
        let row: Option<ClaimRow> = sqlx::query_as(&self.read)
            .bind(request.key.0.as_slice())
            .bind(now_us())
            .fetch_optional(conn)
            .await
            .map_err(map_err)?;
        match row {
            Some(row) if row.remaining_us > 0 => row.into_claim(request.fingerprint).map(Some),
            _ => Ok(None),
        }
    }

    /// Inserts or takes over the key if absent or expired.
    async fn upsert(
        &self,
        conn: &mut SqliteConnection,
        request: ClaimRequest<'_>,
    ) -> Result<Option<Claim>, StoreError> {
        let row: Option<(i64, i64)> = sqlx::query_as(&self.upsert)
            .bind(request.key.0.as_slice())
            .bind(request.namespace)
            .bind(request.fingerprint.0.as_slice())
            .bind(now_us())
            .bind(micros(request.lease))
            .bind(request.claim_id.as_bytes().as_slice())
            .bind(request.mechanism.map(idempotency_core::Mechanism::as_str))
            .bind(request.key_derivation.map(i64::from))
            .fetch_optional(conn)
            .await
            .map_err(map_err)?;
        row.map(|(token, attempts)| {
            Ok(Claim::Acquired(Lease {
                token: FencingToken::new(u64::try_from(token).map_err(|_| {
                    StoreError::Codec(format!("token out of range: {token}").into())
                })?),
                attempt: u32::try_from(attempts).map_err(|_| {
                    StoreError::Codec(format!("attempts out of range: {attempts}").into())
                })?,
                took_over: attempts > 1,
            }))
        })
        .transpose()
    }

    /// Claims the key: a read first, then the upsert; inside a transaction (`in_tx`) the upsert
    /// first, since it takes the database's write lock (waiting for a concurrent claimer's
    /// transaction to end), so the read after it sees the latest state.
    async fn claim(
        &self,
        conn: &mut SqliteConnection,
        request: ClaimRequest<'_>,
        in_tx: bool,
    ) -> Result<Claim, StoreError> {
        for _ in 0..CLAIM_ROUNDS {
            if !in_tx && let Some(claim) = self.read_live(conn, request).await? {
                return Ok(claim);
            }
            if let Some(claim) = self.upsert(conn, request).await? {
                return Ok(claim);
            }
            if in_tx && let Some(claim) = self.read_live(conn, request).await? {
                return Ok(claim);
            }
        }
        Err(StoreError::Backend(
            format!("claim lost {CLAIM_ROUNDS} races in a row on one key").into(),
        ))
    }
}
