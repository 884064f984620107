//! What a database brings to [`SqlStore`]: its statements and the steps that differ, over the
//! statements every database runs alike.

use std::future::Future;
use std::time::Duration;

use sqlx::{Arguments, Database, Encode, Executor, FromRow, IntoArguments, Pool, Type};

use super::common::{RecordRow, RowsAffected, map_err, unix_micros};
use super::schema::Steps;
use super::store::SqlStore;
use super::tx::{TxClaim, TxClaimRequest};
use crate::RecordState;
use crate::operations::{Archive, AuditEntry, Counts};
use crate::{Claim, ClaimId, ClaimRequest, FencingToken, Outcome, Record, StorageKey, StoreError};

/// A database a [`SqlStore`] runs on: sqlx's `Postgres`, `MySql` and `Sqlite` (features
/// `postgres`, `mysql`, `sqlite`). Sealed: the store's statements are written for these three.
pub trait Dialect: sealed::Steps {}

impl<D: sealed::Steps> Dialect for D {}

/// The statements of one record table, built once per table name.
pub struct TableSql<Own> {
    /// The schema, version by version ([`super::schema`]).
    pub(crate) steps: Steps,
    /// Deletes an owned in-progress record: key, token.
    pub(crate) release: String,
    /// Deletes a record in any state if its token is the one given: key, token (an
    /// operator's fenced delete).
    pub(crate) delete: String,
    /// Deletes an in-progress record of one claimer: key, claim id.
    pub(crate) undo: String,
    /// A whole record ([`RecordRow`]): key.
    pub(crate) get: String,
    /// Every record ([`RecordRow`]), ending in a condition that `AND …` may follow.
    pub(crate) select_records: String,
    /// Counts one more conflict on a record ([`super::conflicts`]): key.
    pub(crate) mark_conflict: String,
    /// The statements the dialect runs its own way (claims, complete, touch, purge).
    pub(crate) own: Own,
}

pub(crate) mod sealed {
    use super::*;

    /// The steps each database writes its own way: the claims, complete, touch, purge, the
    /// migration and how a transaction begins.
    pub trait Steps:
        Shared + super::super::conflicts::sealed::Mark + Sized + Send + Sync + 'static
    {
        /// The dialect's own statements, in [`TableSql::own`].
        type Own: Send + Sync + 'static;

        /// How `list` compares `updated_at` with a bound parameter of Unix microseconds: the
        /// text before and after the parameter.
        const LIST_TIME: (&'static str, &'static str);

        /// The statement that begins a transaction fit for a transactional claim, if not the
        /// driver's own `BEGIN`.
        const BEGIN: Option<&'static str> = None;

        /// How an identifier is quoted: before and after.
        const QUOTE: (&'static str, &'static str) = ("\"", "\"");

        /// What a purge's `SELECT` ends in to lock the rows it will delete.
        const LOCK_ROWS: &'static str;

        /// The database's time now, in the type of the record table's time columns (an
        /// archive's `archived_at`).
        const NOW: &'static str;

        /// The database's time now minus a parameter of microseconds, in the type of the time
        /// columns: the text before and after the parameter. Where set, purges, counts and
        /// listings judge expiry by the database's clock, as the store's leases and TTLs do;
        /// `None` (SQLite, embedded): by the host clock, as its store does.
        const CLOCK_MINUS: Option<(&'static str, &'static str)> = None;

        /// The column type of an audit table's generated primary key.
        const SERIAL_KEY: &'static str;

        /// How a time column (or an aggregate of one) becomes Unix microseconds: the text
        /// before and after it.
        const MICROS: (&'static str, &'static str);

        /// The statements of `table` (a validated identifier).
        fn statements(table: &str) -> TableSql<Self::Own>;

        /// [`Store::claim`](crate::Store::claim) on a connection.
        fn claim_on(
            store: &SqlStore<Self>,
            conn: &mut Self::Connection,
            request: ClaimRequest<'_>,
        ) -> impl Future<Output = Result<Claim, StoreError>> + Send;

        /// A claim inside the caller's transaction, its wait on a concurrent claimer bounded
        /// by `request.in_flight` where the database can.
        fn claim_in_tx_on(
            store: &SqlStore<Self>,
            conn: &mut Self::Connection,
            request: TxClaimRequest<'_>,
        ) -> impl Future<Output = Result<TxClaim, StoreError>> + Send;

        /// Stores the outcome of an owned record on a connection.
        fn complete_on(
            store: &SqlStore<Self>,
            conn: &mut Self::Connection,
            key: &StorageKey,
            token: FencingToken,
            outcome: &Outcome,
            ttl: Duration,
        ) -> impl Future<Output = Result<(), StoreError>> + Send;

        /// Renews the lease of an owned record.
        fn touch(
            store: &SqlStore<Self>,
            key: &StorageKey,
            token: FencingToken,
            lease: Duration,
        ) -> impl Future<Output = Result<(), StoreError>> + Send;

        /// One bounded delete of purgeable records.
        fn purge(
            store: &SqlStore<Self>,
            limit: usize,
        ) -> impl Future<Output = Result<u64, StoreError>> + Send;

        /// Brings the table to this release's schema, serialized against concurrent migrations.
        fn migrate(store: &SqlStore<Self>) -> impl Future<Output = Result<(), StoreError>> + Send;

        /// The record TTL the table was configured with, as a store's `migrate` recorded it
        /// (zero where none is).
        fn recorded_ttl(
            store: &SqlStore<Self>,
        ) -> impl Future<Output = Result<Duration, StoreError>> + Send;

        /// The SQL text of one statement by name, for benchmarks that run it through raw sqlx.
        #[cfg(feature = "testing")]
        fn statement<'a>(sql: &'a TableSql<Self::Own>, name: &str) -> Option<&'a str>;
    }

    /// The statements every database runs alike, written once over sqlx's traits.
    pub trait Shared: Database {
        /// Runs a statement on `conn` that takes a key and a fencing token; rows affected.
        fn fenced(
            conn: &mut Self::Connection,
            sql: &str,
            key: &StorageKey,
            token: i64,
        ) -> impl Future<Output = Result<u64, StoreError>> + Send;

        /// Runs a statement on `pool` that takes a key and a claim id; rows affected.
        fn of_claimer(
            pool: &Pool<Self>,
            sql: &str,
            key: &StorageKey,
            claim_id: ClaimId,
        ) -> impl Future<Output = Result<u64, StoreError>> + Send;

        /// The record a statement that takes a key selects, if any.
        fn record(
            pool: &Pool<Self>,
            sql: &str,
            key: &StorageKey,
        ) -> impl Future<Output = Result<Option<Record>, StoreError>> + Send;

        /// The records `select` (ending in a condition) selects under `filter`, oldest
        /// `updated_at` first; `time` wraps each bound time parameter ([`Steps::LIST_TIME`]).
        fn records(
            pool: &Pool<Self>,
            select: &str,
            filter: &super::super::ListFilter,
            time: (&'static str, &'static str),
        ) -> impl Future<Output = Result<Vec<Record>, StoreError>> + Send;

        /// The records `select` selects under `filter` after the storage key `after`, in the
        /// order of their storage keys: one page of an operations scan.
        fn records_after(
            pool: &Pool<Self>,
            select: &str,
            filter: &super::super::ListFilter,
            after: Option<&StorageKey>,
            time: (&'static str, &'static str),
        ) -> impl Future<Output = Result<Vec<Record>, StoreError>> + Send;

        /// One purge batch in one transaction: the expired records after `batch.after`
        /// selected and locked, copied to `archive`, deleted (if still expired); the records
        /// and how many were deleted.
        fn purge_batch(
            pool: &Pool<Self>,
            sql: PurgeSql<'_>,
            batch: PurgeBatch<'_>,
            archive: &mut Archive,
        ) -> impl Future<Output = Result<(Vec<Record>, u64), StoreError>> + Send;

        /// Runs one statement without parameters.
        fn run(pool: &Pool<Self>, sql: &str)
        -> impl Future<Output = Result<(), StoreError>> + Send;

        /// The records of `table` (quoted) under `filter` (its state ignored) per status at
        /// `now`, and the oldest abandoned one's last write: three counts, each served by the
        /// `(namespace, state, updated_at)` index.
        fn count_records(
            pool: &Pool<Self>,
            table: &str,
            filter: &super::super::ListFilter,
            clock: Clock,
            time: (&'static str, &'static str),
        ) -> impl Future<Output = Result<Counts, StoreError>> + Send;

        /// The database's time now, as Unix microseconds, by `clock` (the host's where the
        /// store keeps the host clock).
        fn now_micros(
            pool: &Pool<Self>,
            clock: Clock,
        ) -> impl Future<Output = Result<i64, StoreError>> + Send;

        /// Inserts one audit entry into `table` (quoted) on `conn` (in a transaction, with the
        /// action it records).
        fn write_audit(
            conn: &mut Self::Connection,
            table: &str,
            entry: &AuditEntry,
        ) -> impl Future<Output = Result<(), StoreError>> + Send;
    }

    /// The statements of a purge batch, as the dialect writes them.
    #[derive(Clone, Copy)]
    pub struct PurgeSql<'a> {
        /// The record table's `select_records`.
        pub select: &'a str,
        /// The record table (unquoted).
        pub table: &'a str,
        /// How identifiers are quoted.
        pub quote: (&'static str, &'static str),
        /// [`Steps::LOCK_ROWS`].
        pub lock: &'static str,
        /// [`Steps::NOW`].
        pub now: &'static str,
        /// [`Steps::BEGIN`].
        pub begin: Option<&'static str>,
        /// The clock expiry is judged by.
        pub clock: Clock,
    }

    /// The clock a purge, a count or a listing judges expiry by: the database's
    /// ([`Steps::CLOCK_MINUS`]), or the host's.
    #[derive(Clone, Copy)]
    pub struct Clock {
        /// [`Steps::CLOCK_MINUS`].
        pub minus: Option<(&'static str, &'static str)>,
        /// [`Steps::NOW`].
        pub now: &'static str,
        /// [`Steps::MICROS`].
        pub micros: (&'static str, &'static str),
        /// [`Steps::LIST_TIME`].
        pub time: (&'static str, &'static str),
        /// The host's time, read once for the operation (used where `minus` is `None`).
        pub host_now: std::time::SystemTime,
    }

    impl Clock {
        /// The clock of dialect `D`, the host's time read now.
        pub fn of<D: Steps>() -> Self {
            Self {
                minus: D::CLOCK_MINUS,
                now: D::NOW,
                micros: D::MICROS,
                time: D::LIST_TIME,
                host_now: std::time::SystemTime::now(),
            }
        }

        /// Appends "now minus `micros`" by this clock, in the type of the time columns.
        fn push_minus<DB: Database>(
            &self,
            sql: &mut String,
            args: &mut DB::Arguments<'_>,
            micros: i64,
        ) -> Result<(), StoreError>
        where
            i64: for<'q> Encode<'q, DB> + Type<DB>,
        {
            match self.minus {
                Some((before, after)) => push_bind(sql, args, before, micros, after),
                None => {
                    let at = unix_micros(self.host_now).saturating_sub(micros);
                    push_bind(sql, args, self.time.0, at, self.time.1)
                }
            }
        }

        /// A query of the database's time now in Unix microseconds, where it keeps the clock
        /// (twice: the row type every dialect decodes, as a count's).
        fn now_sql(&self) -> Option<String> {
            self.minus.map(|_| {
                let now = format!("{}{}{}", self.micros.0, self.now, self.micros.1);
                format!("SELECT {now}, {now}")
            })
        }
    }

    /// Which records one purge batch takes.
    #[derive(Clone, Copy)]
    pub struct PurgeBatch<'a> {
        /// Only this namespace.
        pub namespace: Option<&'a str>,
        /// After this storage key (the previous batch's last).
        pub after: Option<&'a StorageKey>,
        /// At most this many.
        pub limit: usize,
        /// When the host archived the batch (JSON lines' `archived_at`); expiry is judged by
        /// [`PurgeSql::clock`].
        pub now: std::time::SystemTime,
        /// The store's abandoned grace.
        pub grace: Duration,
        /// The TTL the table is configured with: younger records (by their last write) stay.
        pub floor: Duration,
    }

    impl<DB> Shared for DB
    where
        DB: Database,
        for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
        for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
        for<'q> &'q [u8]: Encode<'q, DB> + Type<DB>,
        for<'q> &'q str: Encode<'q, DB> + Type<DB>,
        String: for<'q> Encode<'q, DB> + Type<DB>,
        i64: for<'q> Encode<'q, DB> + Type<DB>,
        Vec<u8>: for<'q> Encode<'q, DB> + Type<DB>,
        Option<String>: for<'q> Encode<'q, DB> + Type<DB>,
        RecordRow: for<'r> FromRow<'r, DB::Row>,
        (i64, Option<i64>): for<'r> FromRow<'r, DB::Row>,
        DB::QueryResult: RowsAffected,
    {
        async fn fenced(
            conn: &mut Self::Connection,
            sql: &str,
            key: &StorageKey,
            token: i64,
        ) -> Result<u64, StoreError> {
            let done = sqlx::query(sql)
                .bind(key.0.as_slice())
                .bind(token)
                .execute(conn)
                .await
                .map_err(map_err)?;
            Ok(done.rows())
        }

        async fn of_claimer(
            pool: &Pool<Self>,
            sql: &str,
            key: &StorageKey,
            claim_id: ClaimId,
        ) -> Result<u64, StoreError> {
            let done = sqlx::query(sql)
                .bind(key.0.as_slice())
                .bind(claim_id.as_bytes().as_slice())
                .execute(pool)
                .await
                .map_err(map_err)?;
            Ok(done.rows())
        }

        async fn record(
            pool: &Pool<Self>,
            sql: &str,
            key: &StorageKey,
        ) -> Result<Option<Record>, StoreError> {
            let row: Option<RecordRow> = sqlx::query_as(sql)
                .bind(key.0.as_slice())
                .fetch_optional(pool)
                .await
                .map_err(map_err)?;
            row.map(RecordRow::into_record).transpose()
        }

        async fn records(
            pool: &Pool<Self>,
            select: &str,
            filter: &super::super::ListFilter,
            time: (&'static str, &'static str),
        ) -> Result<Vec<Record>, StoreError> {
            let mut sql = String::from(select);
            let mut args = DB::Arguments::default();
            filtered::<DB>(&mut sql, &mut args, filter, time)?;
            push_bind(
                &mut sql,
                &mut args,
                " ORDER BY updated_at LIMIT ",
                filter.limit_param(),
                "",
            )?;
            let rows: Vec<RecordRow> = sqlx::query_as_with(&sql, args)
                .fetch_all(pool)
                .await
                .map_err(map_err)?;
            rows.into_iter().map(RecordRow::into_record).collect()
        }

        async fn records_after(
            pool: &Pool<Self>,
            select: &str,
            filter: &super::super::ListFilter,
            after: Option<&StorageKey>,
            time: (&'static str, &'static str),
        ) -> Result<Vec<Record>, StoreError> {
            let mut sql = String::from(select);
            let mut args = DB::Arguments::default();
            filtered::<DB>(&mut sql, &mut args, filter, time)?;
            if let Some(after) = after {
                push_bind(
                    &mut sql,
                    &mut args,
                    " AND key_hash > ",
                    after.0.to_vec(),
                    "",
                )?;
            }
            push_bind(
                &mut sql,
                &mut args,
                " ORDER BY key_hash LIMIT ",
                filter.limit_param(),
                "",
            )?;
            let rows: Vec<RecordRow> = sqlx::query_as_with(&sql, args)
                .fetch_all(pool)
                .await
                .map_err(map_err)?;
            rows.into_iter().map(RecordRow::into_record).collect()
        }

        async fn purge_batch(
            pool: &Pool<Self>,
            sql: PurgeSql<'_>,
            batch: PurgeBatch<'_>,
            archive: &mut Archive,
        ) -> Result<(Vec<Record>, u64), StoreError> {
            let mut tx = match sql.begin {
                Some(statement) => pool.begin_with(statement).await,
                None => pool.begin().await,
            }
            .map_err(map_err)?;
            // The expired records of the batch, locked until the delete commits.
            let mut select = String::from(sql.select);
            select.push_str(" AND");
            let mut args = DB::Arguments::default();
            expired::<DB>(&mut select, &mut args, &batch, &sql.clock)?;
            if let Some(namespace) = batch.namespace {
                push_bind(
                    &mut select,
                    &mut args,
                    " AND namespace = ",
                    namespace.to_owned(),
                    "",
                )?;
            }
            if let Some(after) = batch.after {
                push_bind(
                    &mut select,
                    &mut args,
                    " AND key_hash > ",
                    after.0.to_vec(),
                    "",
                )?;
            }
            let limit = i64::try_from(batch.limit).unwrap_or(i64::MAX);
            push_bind(
                &mut select,
                &mut args,
                " ORDER BY key_hash LIMIT ",
                limit,
                "",
            )?;
            select.push_str(sql.lock);
            let rows: Vec<RecordRow> = sqlx::query_as_with(&select, args)
                .fetch_all(&mut *tx)
                .await
                .map_err(map_err)?;
            let records = rows
                .into_iter()
                .map(RecordRow::into_record)
                .collect::<Result<Vec<_>, _>>()?;
            if records.is_empty() {
                tx.commit().await.map_err(map_err)?;
                return Ok((records, 0));
            }
            let (open, close) = sql.quote;
            let keys = |sql: &mut String, args: &mut DB::Arguments<'_>| {
                sql.push_str(" key_hash IN (");
                for (index, record) in records.iter().enumerate() {
                    let comma = if index == 0 { "" } else { ", " };
                    push_bind(sql, args, comma, record.key.0.to_vec(), "")?;
                }
                sql.push(')');
                Ok::<(), StoreError>(())
            };
            match archive {
                Archive::Table(archive) => {
                    let mut copy = format!(
                        "INSERT INTO {open}{archive}{close} SELECT r.*, {} FROM {open}{}{close} r WHERE",
                        sql.now, sql.table
                    );
                    let mut args = DB::Arguments::default();
                    keys(&mut copy, &mut args)?;
                    sqlx::query_with(&copy, args)
                        .execute(&mut *tx)
                        .await
                        .map_err(map_err)?;
                }
                lines => lines.write_lines(&records, batch.now)?,
            }
            let mut delete = format!("DELETE FROM {open}{}{close} WHERE", sql.table);
            let mut args = DB::Arguments::default();
            keys(&mut delete, &mut args)?;
            delete.push_str(" AND");
            expired::<DB>(&mut delete, &mut args, &batch, &sql.clock)?;
            let deleted = sqlx::query_with(&delete, args)
                .execute(&mut *tx)
                .await
                .map_err(map_err)?
                .rows();
            tx.commit().await.map_err(map_err)?;
            Ok((records, deleted))
        }

        async fn count_records(
            pool: &Pool<Self>,
            table: &str,
            filter: &super::super::ListFilter,
            clock: Clock,
            time: (&'static str, &'static str),
        ) -> Result<Counts, StoreError> {
            let (micros_before, micros_after) = clock.micros;
            // Ages are measured by the clock that judged the leases.
            let now = Self::now_micros(pool, clock).await?;
            let mut counts = Counts::default();
            for (state, lease_ended) in [
                (RecordState::Completed, None),
                (RecordState::InProgress, Some(false)),
                (RecordState::InProgress, Some(true)),
            ] {
                let mut sql = format!(
                    "SELECT COUNT(*), {micros_before}MIN(updated_at){micros_after} FROM {table} \
                     WHERE 1 = 1"
                );
                let mut args = DB::Arguments::default();
                let filter = super::super::ListFilter {
                    state: Some(state),
                    ..filter.clone()
                };
                filtered::<DB>(&mut sql, &mut args, &filter, time)?;
                if let Some(ended) = lease_ended {
                    let compare = if ended {
                        " AND expires_at <= "
                    } else {
                        " AND expires_at > "
                    };
                    sql.push_str(compare);
                    clock.push_minus::<DB>(&mut sql, &mut args, 0)?;
                }
                let (count, oldest): (i64, Option<i64>) = sqlx::query_as_with(&sql, args)
                    .fetch_one(pool)
                    .await
                    .map_err(map_err)?;
                let count = u64::try_from(count).unwrap_or(0);
                counts.examined += count;
                match (state, lease_ended) {
                    (RecordState::Completed, _) => counts.completed = count,
                    (_, Some(true)) => {
                        counts.abandoned = count;
                        counts.oldest_abandoned_ms = oldest.map(|micros| {
                            let age = now.saturating_sub(micros);
                            u64::try_from(age / 1000).unwrap_or(0)
                        });
                    }
                    _ => counts.in_progress = count,
                }
            }
            Ok(counts)
        }

        async fn now_micros(pool: &Pool<Self>, clock: Clock) -> Result<i64, StoreError> {
            let Some(sql) = clock.now_sql() else {
                return Ok(unix_micros(clock.host_now));
            };
            let (now, _): (i64, Option<i64>) = sqlx::query_as(&sql)
                .fetch_one(pool)
                .await
                .map_err(map_err)?;
            Ok(now)
        }

        async fn run(pool: &Pool<Self>, sql: &str) -> Result<(), StoreError> {
            sqlx::query(sql).execute(pool).await.map_err(map_err)?;
            Ok(())
        }

        async fn write_audit(
            conn: &mut Self::Connection,
            table: &str,
            entry: &AuditEntry,
        ) -> Result<(), StoreError> {
            let mut sql = format!(
                "INSERT INTO {table} (at_ms, actor, reason, action, namespace, key_hash, \
                 applied, detail, record) VALUES ("
            );
            let mut args = DB::Arguments::default();
            let at = i64::try_from(entry.at_ms).unwrap_or(i64::MAX);
            push_bind(&mut sql, &mut args, "", at, ", ")?;
            push_bind(&mut sql, &mut args, "", entry.actor.clone(), ", ")?;
            push_bind(&mut sql, &mut args, "", entry.reason.clone(), ", ")?;
            push_bind(
                &mut sql,
                &mut args,
                "",
                entry.action.as_str().to_owned(),
                ", ",
            )?;
            push_bind(&mut sql, &mut args, "", entry.namespace.clone(), ", ")?;
            push_bind(&mut sql, &mut args, "", entry.key_hash.clone(), ", ")?;
            push_bind(&mut sql, &mut args, "", i64::from(entry.applied), ", ")?;
            push_bind(&mut sql, &mut args, "", entry.detail.clone(), ", ")?;
            push_bind(&mut sql, &mut args, "", entry.was_json(), ")")?;
            sqlx::query_with(&sql, args)
                .execute(conn)
                .await
                .map_err(map_err)?;
            Ok(())
        }
    }

    /// Appends the conditions of `filter` but its limit (namespace, state, `updated_at`).
    fn filtered<DB: Database>(
        sql: &mut String,
        args: &mut DB::Arguments<'_>,
        filter: &super::super::ListFilter,
        (before_time, after_time): (&'static str, &'static str),
    ) -> Result<(), StoreError>
    where
        String: for<'q> Encode<'q, DB> + Type<DB>,
        i64: for<'q> Encode<'q, DB> + Type<DB>,
    {
        if let Some(namespace) = &filter.namespace {
            push_bind(sql, args, " AND namespace = ", namespace.clone(), "")?;
        }
        if let Some(state) = filter.state {
            let state = state.as_str().to_owned();
            push_bind(sql, args, " AND state = ", state, "")?;
        }
        for (condition, at) in [
            (" AND updated_at >= ", filter.updated_from),
            (" AND updated_at < ", filter.updated_before),
        ] {
            if let Some(at) = at {
                sql.push_str(condition);
                push_bind(sql, args, before_time, unix_micros(at), after_time)?;
            }
        }
        Ok(())
    }

    /// Appends ` (… expired …) AND …`: completed past the TTL, or an abandoned lease past its
    /// end plus the grace, and last written at least the table's configured TTL ago, by
    /// `clock` (the stores' own `purge_expired` condition).
    fn expired<DB: Database>(
        sql: &mut String,
        args: &mut DB::Arguments<'_>,
        batch: &PurgeBatch<'_>,
        clock: &Clock,
    ) -> Result<(), StoreError>
    where
        i64: for<'q> Encode<'q, DB> + Type<DB>,
    {
        let grace = i64::try_from(batch.grace.as_micros()).unwrap_or(i64::MAX);
        let floor = i64::try_from(batch.floor.as_micros()).unwrap_or(i64::MAX);
        sql.push_str(" ((state = 'completed' AND expires_at <= ");
        clock.push_minus::<DB>(sql, args, 0)?;
        sql.push_str(") OR expires_at <= ");
        clock.push_minus::<DB>(sql, args, grace)?;
        sql.push_str(") AND updated_at <= ");
        clock.push_minus::<DB>(sql, args, floor)?;
        Ok(())
    }

    /// Appends `before`, a placeholder for `value` (bound in `args`) and `after` to `sql`.
    fn push_bind<'q, DB, T>(
        sql: &mut String,
        args: &mut DB::Arguments<'q>,
        before: &str,
        value: T,
        after: &str,
    ) -> Result<(), StoreError>
    where
        DB: Database,
        T: 'q + Encode<'q, DB> + Type<DB>,
    {
        sql.push_str(before);
        args.add(value)
            .map_err(|error| StoreError::Codec(error.to_string().into()))?;
        args.format_placeholder(sql)
            .map_err(|error| StoreError::Codec(error.to_string().into()))?;
        sql.push_str(after);
        Ok(())
    }
}
