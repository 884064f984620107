//! Versioned schema migrations.
//!
//! Each table's schema (record tables, outbox tables) is a list of steps, version 1 first; the
//! table `idempotency_schema` keeps the version every table is at, and `migrate()` applies the
//! steps after it, once and in order, under a lock (several processes may start at once). A table that exists
//! without a version row was created before versions were kept: it is at version 1, the schema
//! of release 0.1. An up-to-date table costs two reads and no DDL, so starting a service logs
//! nothing.

use std::marker::PhantomData;
use std::time::Duration;

use sqlx::{Database, Decode, Encode, Executor, IntoArguments, Type};

use super::common::map_err;
use idempotency_core::Error;

/// The table that keeps each record table's schema version.
pub const SCHEMA_TABLE: &str = "idempotency_schema";

/// The schema version this release brings record tables to: 1 is release 0.1's schema, 2 adds
/// the claim id of in-progress records, 3 the conflict mark (`conflicts`, `last_conflict_at`),
/// 4 what wrote each record (its mechanism and key derivation; rows written before read as
/// unknown), 5 the checkpoints of runs with steps (`progress`), 6 a waiter's flag on
/// PostgreSQL (`waited`, see `PostgresStore::with_wake_ups`; nothing elsewhere), 7 drops
/// PostgreSQL's `CHECK` on `state` (it cost every write; nothing elsewhere).
pub const SCHEMA_VERSION: u32 = 7;

/// The statements a dialect runs to read and write versions. Each takes the record table's
/// name as its one parameter, `write_version` the version as its second.
pub(crate) struct VersionSql {
    /// Creates [`SCHEMA_TABLE`] if missing.
    pub(crate) create: &'static str,
    /// The table's version, if recorded.
    pub(crate) read: &'static str,
    /// `1` if the record table exists (created before versions were kept), else no row.
    pub(crate) exists: &'static str,
    /// Records the table's version.
    pub(crate) write: &'static str,
    /// Adds the column of each table's configured record TTL (`record_ttl_us`) to
    /// [`SCHEMA_TABLE`] where missing (it came after the versions table).
    pub(crate) add_ttl: &'static str,
    /// Records a table's configured record TTL in µs: the TTL first, the table second.
    pub(crate) write_ttl: &'static str,
    /// A table's configured record TTL in µs, if recorded (the table as its one parameter).
    pub(crate) read_ttl: &'static str,
}

/// The schema of one table: `steps[i]` brings it from version `i` to `i + 1`; its latest
/// version is the number of steps.
pub type Steps = Vec<Vec<String>>;

/// The versions table of database `DB`, as its [`VersionSql`] reads and writes it: one handle,
/// so the bounds on `DB` that its statements need are written once.
pub struct Versions<DB> {
    sql: &'static VersionSql,
    // `fn() -> DB`: the handle is `Send` and `Sync` whatever `DB` is.
    database: PhantomData<fn() -> DB>,
}

impl<DB> Versions<DB> {
    /// The versions table as `sql` reads and writes it.
    pub(crate) const fn new(sql: &'static VersionSql) -> Self {
        Self {
            sql,
            database: PhantomData,
        }
    }
}

impl<DB> Versions<DB>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    i64: Type<DB> + for<'q> Encode<'q, DB> + for<'r> Decode<'r, DB>,
    (i64,): for<'r> sqlx::FromRow<'r, DB::Row>,
    (Option<i64>,): for<'r> sqlx::FromRow<'r, DB::Row>,
{
    /// Brings `table` to the latest version of `steps` on `conn`, then records `ttl` as its
    /// record TTL where given. The caller has locked `conn` against concurrent migrations
    /// (and, where DDL is transactional, opened a transaction on it).
    pub(crate) async fn migrate(
        &self,
        conn: &mut DB::Connection,
        table: &str,
        steps: &Steps,
        ttl: Option<Duration>,
    ) -> Result<(), Error> {
        self.bring_up(conn, table, steps).await?;
        match ttl {
            Some(ttl) => self.write_ttl(conn, table, ttl).await,
            None => Ok(()),
        }
    }

    /// Brings `table` to the latest version of `steps` on `conn`.
    async fn bring_up(
        &self,
        conn: &mut DB::Connection,
        table: &str,
        steps: &Steps,
    ) -> Result<(), Error> {
        let sql = self.sql;
        sqlx::query(sql.create)
            .execute(&mut *conn)
            .await
            .map_err(map_err)?;
        let recorded: Option<(i64,)> = sqlx::query_as(sql.read)
            .bind(table)
            .fetch_optional(&mut *conn)
            .await
            .map_err(map_err)?;
        let current = match recorded {
            Some((version,)) => version,
            None => {
                let existing: Option<(i64,)> = sqlx::query_as(sql.exists)
                    .bind(table)
                    .fetch_optional(&mut *conn)
                    .await
                    .map_err(map_err)?;
                i64::from(existing.is_some())
            }
        };
        let latest = i64::try_from(steps.len()).unwrap_or(i64::MAX);
        if current > latest {
            return Err(Error::Config(format!(
                "table {table} is at schema version {current}, newer than this release's \
                 {latest}: upgrade the service, or run the newer release's migrations"
            )));
        }
        if current < latest {
            let from = usize::try_from(current).unwrap_or(0);
            for statements in &steps[from..] {
                for statement in statements {
                    match sqlx::query(statement).execute(&mut *conn).await {
                        Ok(_) => {}
                        Err(error) if already_applied(&error) => {}
                        Err(error) => return Err(map_err(error)),
                    }
                }
            }
            tracing::info!(
                table,
                from = current,
                to = latest,
                "idempotency table migrated"
            );
        } else if recorded.is_some() {
            return Ok(());
        }
        sqlx::query(sql.write)
            .bind(table)
            .bind(latest)
            .execute(&mut *conn)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    /// Records `ttl` as the record TTL `table` is configured with (the column added first
    /// where missing), on `conn`, locked against concurrent migrations as
    /// [`migrate`](Self::migrate) is.
    async fn write_ttl(
        &self,
        conn: &mut DB::Connection,
        table: &str,
        ttl: Duration,
    ) -> Result<(), Error> {
        match sqlx::query(self.sql.add_ttl).execute(&mut *conn).await {
            Ok(_) => {}
            Err(error) if already_applied(&error) => {}
            Err(error) => return Err(map_err(error)),
        }
        sqlx::query(self.sql.write_ttl)
            .bind(i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX))
            .bind(table)
            .execute(&mut *conn)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    /// The record TTL `table` was configured with, as recorded by a store's `migrate`; zero
    /// where none is (no versions table, a versions table from before the column, a table
    /// migrated by stores that set none).
    pub(crate) async fn read_ttl(
        &self,
        conn: &mut DB::Connection,
        table: &str,
    ) -> Result<Duration, Error> {
        let read: Result<Option<(Option<i64>,)>, sqlx::Error> = sqlx::query_as(self.sql.read_ttl)
            .bind(table)
            .fetch_optional(&mut *conn)
            .await;
        match read {
            Ok(row) => {
                let micros = row.and_then(|(micros,)| micros).unwrap_or(0);
                Ok(Duration::from_micros(u64::try_from(micros).unwrap_or(0)))
            }
            Err(error) if not_there(&error) => Ok(Duration::ZERO),
            Err(error) => Err(map_err(error)),
        }
    }
}

/// Whether a step failed because it had been applied already: a column added by a migration
/// that stopped before it recorded its version (MySQL's DDL commits at once; SQLite and MySQL
/// have no `ADD COLUMN IF NOT EXISTS`).
fn already_applied(error: &sqlx::Error) -> bool {
    let sqlx::Error::Database(error) = error else {
        return false;
    };
    // MySQL and MariaDB: ER_DUP_FIELDNAME; SQLite: a generic error with this message.
    error.code().as_deref() == Some("42S21")
        || error
            .message()
            .to_ascii_lowercase()
            .starts_with("duplicate column name")
}

/// Whether a read failed because the versions table, or its TTL column, does not exist.
fn not_there(error: &sqlx::Error) -> bool {
    let sqlx::Error::Database(error) = error else {
        return false;
    };
    // PostgreSQL: undefined column, undefined table; MySQL and MariaDB: ER_BAD_FIELD_ERROR,
    // ER_NO_SUCH_TABLE; SQLite: a generic error with these messages.
    matches!(
        error.code().as_deref(),
        Some("42703" | "42P01" | "42S22" | "42S02" | "1054" | "1146")
    ) || {
        let message = error.message().to_ascii_lowercase();
        message.starts_with("no such column") || message.starts_with("no such table")
    }
}
