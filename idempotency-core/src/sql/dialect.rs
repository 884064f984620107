//! What a database brings to [`SqlStore`]: its statements and the steps that differ, over the
//! statements every database runs alike.

use std::future::Future;
use std::time::Duration;

use sqlx::{Arguments, Database, Encode, Executor, FromRow, IntoArguments, Pool, Type};

use super::common::{RecordRow, RowsAffected, map_err, unix_micros};
use super::schema::Steps;
use super::store::SqlStore;
use super::tx::{TxClaim, TxClaimRequest};
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
    /// Deletes an in-progress record of one claimer: key, claim id.
    pub(crate) undo: String,
    /// A whole record ([`RecordRow`]): key.
    pub(crate) get: String,
    /// Every record ([`RecordRow`]), ending in a condition that `AND …` may follow.
    pub(crate) select_records: String,
    /// The statements the dialect runs its own way (claims, complete, touch, purge).
    pub(crate) own: Own,
}

pub(crate) mod sealed {
    use super::*;

    /// The steps each database writes its own way: the claims, complete, touch, purge, the
    /// migration and how a transaction begins.
    pub trait Steps: Shared + Sized + Send + Sync + 'static {
        /// The dialect's own statements, in [`TableSql::own`].
        type Own: Send + Sync + 'static;

        /// How `list` compares `updated_at` with a bound parameter of Unix microseconds: the
        /// text before and after the parameter.
        const LIST_TIME: (&'static str, &'static str);

        /// The statement that begins a transaction fit for a transactional claim, if not the
        /// driver's own `BEGIN`.
        const BEGIN: Option<&'static str> = None;

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
        RecordRow: for<'r> FromRow<'r, DB::Row>,
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
            (before_time, after_time): (&'static str, &'static str),
        ) -> Result<Vec<Record>, StoreError> {
            let mut sql = String::from(select);
            let mut args = DB::Arguments::default();
            if let Some(namespace) = &filter.namespace {
                push_bind(
                    &mut sql,
                    &mut args,
                    " AND namespace = ",
                    namespace.clone(),
                    "",
                )?;
            }
            if let Some(state) = filter.state {
                let state = state.as_str().to_owned();
                push_bind(&mut sql, &mut args, " AND state = ", state, "")?;
            }
            for (condition, at) in [
                (" AND updated_at >= ", filter.updated_from),
                (" AND updated_at < ", filter.updated_before),
            ] {
                if let Some(at) = at {
                    sql.push_str(condition);
                    push_bind(
                        &mut sql,
                        &mut args,
                        before_time,
                        unix_micros(at),
                        after_time,
                    )?;
                }
            }
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
            .map_err(|error| StoreError::Codec(error.to_string()))?;
        args.format_placeholder(sql)
            .map_err(|error| StoreError::Codec(error.to_string()))?;
        sql.push_str(after);
        Ok(())
    }
}
