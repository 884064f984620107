//! The outbox steps every database runs alike, written once over sqlx's traits (as the record
//! store's [`Shared`](crate::sql::dialect::sealed::Shared) ops): each database brings only its
//! statement text.

use std::future::Future;
use std::time::SystemTime;

use sqlx::{Arguments, Database, Encode, Executor, FromRow, IntoArguments, Pool, Type};

use super::{ArchivedMessage, OutboxSql};
use crate::StoreError;
use crate::operations::Archive;
use crate::sql::common::{RowsAffected, map_err, validate_identifier};

/// Where a purge runs, as the database writes it.
#[derive(Clone, Copy)]
pub(crate) struct PurgePlace {
    /// How identifiers are quoted: before and after.
    pub(crate) quote: (&'static str, &'static str),
    /// The database's time now, in the type of the table's time columns (`archived_at`).
    pub(crate) now: &'static str,
    /// What the `SELECT` of a batch ends in to lock its rows.
    pub(crate) lock: &'static str,
    /// The statement that begins a writing transaction, if not the driver's `BEGIN`.
    pub(crate) begin: Option<&'static str>,
}

/// An archived row as [`OutboxSql::purge_read`] selects it: seq, id, topic, business key,
/// aggregate, payload, attempts, created and sent (Unix microseconds).
type ArchivedRow = (
    i64,
    String,
    String,
    String,
    Option<String>,
    Vec<u8>,
    i64,
    i64,
    Option<i64>,
);

/// The outbox steps written once over sqlx's traits.
pub(crate) trait OutboxShared: Database {
    /// Deletes up to `limit` messages sent before `before` (a bound time as the table's
    /// statements take it), copying them to `archive` first; how many it deleted.
    fn purge_sent(
        pool: &Pool<Self>,
        sql: &OutboxSql,
        place: PurgePlace,
        before: i64,
        limit: usize,
        archive: &mut Archive,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;
}

impl<DB> OutboxShared for DB
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    i64: for<'q> Encode<'q, DB> + Type<DB>,
    (i64,): for<'r> FromRow<'r, DB::Row>,
    ArchivedRow: for<'r> FromRow<'r, DB::Row>,
    DB::QueryResult: RowsAffected,
{
    async fn purge_sent(
        pool: &Pool<Self>,
        sql: &OutboxSql,
        place: PurgePlace,
        before: i64,
        limit: usize,
        archive: &mut Archive,
    ) -> Result<u64, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        if let Archive::None = archive {
            let done = sqlx::query(&sql.purge_sent)
                .bind(before)
                .bind(limit)
                .execute(pool)
                .await
                .map_err(map_err)?;
            return Ok(done.rows());
        }
        let (open, close) = place.quote;
        if let Archive::Table(name) = archive {
            create_archive::<DB>(pool, sql, place, name).await?;
        }
        let mut tx = match place.begin {
            Some(statement) => pool.begin_with(statement).await,
            None => pool.begin().await,
        }
        .map_err(map_err)?;
        // The batch, locked until its delete commits.
        let seqs: Vec<i64> = if let Archive::JsonLines(_) = archive {
            let rows: Vec<ArchivedRow> =
                sqlx::query_as(&format!("{}{}", sql.purge_read, place.lock))
                    .bind(before)
                    .bind(limit)
                    .fetch_all(&mut *tx)
                    .await
                    .map_err(map_err)?;
            let now = SystemTime::now();
            let messages: Vec<ArchivedMessage> = rows
                .into_iter()
                .map(|row| ArchivedMessage::of(row, now))
                .collect();
            // Written and flushed before the delete: a failure from here on leaves the rows,
            // archived again by the next purge (at least once).
            archive.write_json_lines(&messages)?;
            messages.iter().map(|message| message.seq).collect()
        } else {
            sqlx::query_scalar(&format!("{}{}", sql.purge_pick, place.lock))
                .bind(before)
                .bind(limit)
                .fetch_all(&mut *tx)
                .await
                .map_err(map_err)?
        };
        if seqs.is_empty() {
            tx.commit().await.map_err(map_err)?;
            return Ok(0);
        }
        let table = &sql.table;
        if let Archive::Table(name) = archive {
            let copy = format!(
                "INSERT INTO {open}{name}{close} SELECT o.*, {} FROM {open}{table}{close} o \
                 WHERE o.seq IN (",
                place.now
            );
            let (copy, args) = in_list::<DB>(copy, &seqs)?;
            sqlx::query_with(&copy, args)
                .execute(&mut *tx)
                .await
                .map_err(map_err)?;
        }
        let delete = format!("DELETE FROM {open}{table}{close} WHERE seq IN (");
        let (delete, args) = in_list::<DB>(delete, &seqs)?;
        let deleted = sqlx::query_with(&delete, args)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?
            .rows();
        tx.commit().await.map_err(map_err)?;
        Ok(deleted)
    }
}

/// Creates the archive table `name` (the outbox table's columns and `archived_at`) once per
/// outbox handle.
async fn create_archive<DB>(
    pool: &Pool<DB>,
    sql: &OutboxSql,
    place: PurgePlace,
    name: &str,
) -> Result<(), StoreError>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
{
    validate_identifier(name)?;
    if name == sql.table {
        return Err(StoreError::Config(
            "the archive table must not be the outbox table".to_owned(),
        ));
    }
    let created = |archives: &std::sync::Mutex<Vec<String>>| {
        archives
            .lock()
            .map(|names| names.iter().any(|made| made == name))
            .unwrap_or(false)
    };
    if created(&sql.archives) {
        return Ok(());
    }
    let (open, close) = place.quote;
    let create = format!(
        "CREATE TABLE IF NOT EXISTS {open}{name}{close} AS SELECT o.*, {} AS archived_at \
         FROM {open}{}{close} o WHERE 1 = 0",
        place.now, sql.table
    );
    sqlx::query(&create).execute(pool).await.map_err(map_err)?;
    if let Ok(mut names) = sql.archives.lock() {
        names.push(name.to_owned());
    }
    Ok(())
}

/// `sql` (ending in `IN (`) with one placeholder per sequence number and `)`, and the
/// arguments binding them.
fn in_list<'q, DB>(mut sql: String, seqs: &[i64]) -> Result<(String, DB::Arguments<'q>), StoreError>
where
    DB: Database,
    i64: Encode<'q, DB> + Type<DB>,
{
    let mut args = DB::Arguments::default();
    let codec = |error: sqlx::error::BoxDynError| StoreError::Codec(error.to_string());
    for (index, seq) in seqs.iter().enumerate() {
        if index > 0 {
            sql.push_str(", ");
        }
        args.add(*seq).map_err(codec)?;
        args.format_placeholder(&mut sql)
            .map_err(|error| StoreError::Codec(error.to_string()))?;
    }
    sql.push(')');
    Ok((sql, args))
}
