//! The statements every database runs alike ([`Shared`]), written once over sqlx's traits.

use std::future::Future;
use std::time::{Duration, SystemTime};

use idempotency_core::{ClaimId, Record, RecordState, StorageKey, StoreError};
use idempotency_operations::{Archive, AuditEntry, Counts};
use sqlx::{Arguments, Database, Decode, Encode, Executor, FromRow, IntoArguments, Pool, Type};

use super::params::{Clock, Order, Param, PurgeBatch, PurgeSql, Values, push_bind};
use crate::common::{RecordRow, RowsAffected, map_err, unix_micros};
use crate::schema::Versions;

/// The statements every database runs alike, written once over sqlx's traits.
pub trait Shared: Database {
    /// Runs a statement on `conn` that takes a key and a fencing token; rows affected.
    fn fenced(
        conn: &mut Self::Connection,
        sql: &str,
        key: &StorageKey,
        token: i64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Runs `sql` on `conn` with `values` bound in `order`; rows affected.
    fn bound_in_order(
        conn: &mut Self::Connection,
        sql: &str,
        order: &[Param],
        values: Values<'_>,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// The record TTL `table` was configured with, as `versions` recorded it.
    fn read_ttl(
        pool: &Pool<Self>,
        versions: &Versions<Self>,
        table: &str,
    ) -> impl Future<Output = Result<Duration, StoreError>> + Send;

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

    /// The records `select` (ending in a condition) selects under `filter`, in `order`;
    /// `time` wraps each bound time parameter ([`Steps::LIST_TIME`](super::Steps::LIST_TIME)).
    fn records(
        pool: &Pool<Self>,
        select: &str,
        filter: &crate::ListFilter,
        order: Order<'_>,
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
    fn run(pool: &Pool<Self>, sql: &str) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The records of `table` (quoted) under `filter` (its state ignored) per status at
    /// `now`, and the oldest abandoned one's last write: three counts, each served by the
    /// `(namespace, state, updated_at)` index.
    fn count_records(
        pool: &Pool<Self>,
        table: &str,
        filter: &crate::ListFilter,
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

impl<DB> Shared for DB
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q [u8]: Encode<'q, DB> + Type<DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    String: for<'q> Encode<'q, DB> + Type<DB>,
    i64: for<'q> Encode<'q, DB> + Type<DB> + for<'r> Decode<'r, DB>,
    i32: for<'q> Encode<'q, DB> + Type<DB>,
    Vec<u8>: for<'q> Encode<'q, DB> + Type<DB>,
    Option<String>: for<'q> Encode<'q, DB> + Type<DB>,
    RecordRow: for<'r> FromRow<'r, DB::Row>,
    (i64, Option<i64>): for<'r> FromRow<'r, DB::Row>,
    (i64,): for<'r> FromRow<'r, DB::Row>,
    (Option<i64>,): for<'r> FromRow<'r, DB::Row>,
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

    async fn bound_in_order(
        conn: &mut Self::Connection,
        sql: &str,
        order: &[Param],
        values: Values<'_>,
    ) -> Result<u64, StoreError> {
        let mut args = DB::Arguments::default();
        for param in order {
            match param {
                Param::Key => args.add(values.key),
                Param::Token => args.add(values.token),
                Param::Status => args.add(values.status),
                Param::Body => args.add(values.body),
                Param::Span => args.add(values.span),
                Param::HostNow => args.add(unix_micros(SystemTime::now())),
                Param::Limit => args.add(values.limit),
                Param::Grace => args.add(values.grace),
                Param::Floor => args.add(values.floor),
            }
            .map_err(|error| StoreError::Codec(error.to_string().into()))?;
        }
        let done = sqlx::query_with(sql, args)
            .execute(conn)
            .await
            .map_err(map_err)?;
        Ok(done.rows())
    }

    async fn read_ttl(
        pool: &Pool<Self>,
        versions: &Versions<Self>,
        table: &str,
    ) -> Result<Duration, StoreError> {
        let mut conn = pool.acquire().await.map_err(map_err)?;
        versions.read_ttl(&mut conn, table).await
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
        filter: &crate::ListFilter,
        order: Order<'_>,
        time: (&'static str, &'static str),
    ) -> Result<Vec<Record>, StoreError> {
        let mut sql = String::from(select);
        let mut args = DB::Arguments::default();
        filtered::<DB>(&mut sql, &mut args, filter, time)?;
        let order_by = match order {
            Order::Updated => " ORDER BY updated_at LIMIT ",
            Order::KeysAfter(after) => {
                if let Some(after) = after {
                    let after = after.0.to_vec();
                    push_bind(&mut sql, &mut args, " AND key_hash > ", after, "")?;
                }
                " ORDER BY key_hash LIMIT "
            }
        };
        push_bind(&mut sql, &mut args, order_by, filter.limit_param(), "")?;
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
            lines => crate::archive::write_records(lines, &records, batch.now)?,
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
        filter: &crate::ListFilter,
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
            let filter = crate::ListFilter {
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
    filter: &crate::ListFilter,
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
