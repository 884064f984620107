//! The outbox on any database: the steps every database runs alike, written once over sqlx's
//! traits (as the record store's `Shared` ops), and the one [`OutboxTable`] implementation.
//! Each database brings its statement text and what really differs: the claim, its clock,
//! enqueue and wake-ups.
//!
//! Every statement that reads or writes a time takes it as one bound value, which
//! [`moment`] makes: a span from the database's clock on PostgreSQL and MySQL (the statement
//! adds it to its own `now`), a time of the host's clock on SQLite. Statements marking a batch
//! end in `seq IN (` and take `[time, claim]`, then the sequence numbers.

use std::future::Future;
use std::time::{Duration, SystemTime};

use sqlx::{Arguments, Database, Encode, Executor, FromRow, IntoArguments, Type};

use super::{
    Archive, ArchivedMessage, ClaimBatch, Claimed, CountsRow, DeadMessage, Notifications, Outbox,
    OutboxCounts, OutboxSql, OutboxTable,
};
use idempotency_core::StoreError;
use idempotency_sql::from_sqlx as map_err;
use idempotency_sql::support::{RowsAffected, Steps, micros, unix_micros};
use idempotency_sql::validate_identifier;

use super::rows::{ArchivedRow, DeadRow};
pub(crate) use super::rows::{COLUMNS, ClaimedRow, claimed};

/// How often a statement runs again after the database chose it as a deadlock's victim (on
/// MySQL a claim's locking read and another relay's marks lock index entries in different
/// orders).
pub(crate) const DEADLOCK_ROUNDS: usize = 8;

/// The bound time `offset` (signed microseconds) from now, as `DB`'s statements take it.
fn moment<DB: sealed::OutboxSteps>(offset: i64) -> i64 {
    if DB::HOST_CLOCK {
        unix_micros(SystemTime::now()).saturating_add(offset)
    } else {
        offset
    }
}

/// `span` as a signed microsecond offset.
fn span(span: Duration) -> i64 {
    micros(span)
}

pub(crate) mod sealed {
    use super::*;

    /// Where a purge runs, as the database writes it.
    #[derive(Clone, Copy)]
    pub struct PurgePlace {
        /// How identifiers are quoted: before and after.
        pub quote: (&'static str, &'static str),
        /// The database's time now, in the type of the table's time columns (`archived_at`).
        pub now: &'static str,
        /// What the `SELECT` of a batch ends in to lock its rows.
        pub lock: &'static str,
        /// The statement that begins a writing transaction, if not the driver's `BEGIN`.
        pub begin: Option<&'static str>,
    }

    /// What each database does its own way.
    pub trait OutboxSteps: OutboxShared + Sized + Send + Sync + 'static {
        /// Whether statements take times of the host's clock (Unix microseconds) rather than
        /// spans from the database's clock.
        const HOST_CLOCK: bool;

        /// The statements of outbox table `table` (a validated identifier).
        fn statements(table: &str) -> OutboxSql;

        /// Brings `table` to the latest version of `steps`, serialized against concurrent
        /// migrations.
        fn migrate_table(
            pool: &sqlx::Pool<Self>,
            table: &str,
            steps: &Steps,
        ) -> impl Future<Output = Result<(), StoreError>> + Send;

        /// Claims a batch.
        fn claim(
            outbox: &Outbox<Self>,
            batch: ClaimBatch,
        ) -> impl Future<Output = Result<Vec<Claimed>, StoreError>> + Send;

        /// Wake-ups for a relay: none unless the database notifies enqueues.
        fn listen(
            _outbox: &Outbox<Self>,
        ) -> impl Future<Output = Result<Notifications, StoreError>> + Send {
            async { Ok(Notifications::none()) }
        }

        /// Where a purge of this outbox runs.
        fn purge_place(
            outbox: &Outbox<Self>,
        ) -> impl Future<Output = Result<PurgePlace, StoreError>> + Send;

        /// Whether `error` asks to run the statement again (a deadlock's victim).
        fn retryable(_error: &sqlx::Error) -> bool {
            false
        }
    }

    /// The outbox steps written once over sqlx's traits. Statements come from the outbox's
    /// statements; `retry` tells which errors run a statement again.
    pub trait OutboxShared: Database {
        /// Runs a marking statement (ending in `seq IN (`) with `leading` bound first, then
        /// `seqs`; rows affected.
        fn with_seqs(
            outbox: &Outbox<Self>,
            sql: &str,
            leading: [i64; 2],
            seqs: &[i64],
            retry: fn(&sqlx::Error) -> bool,
        ) -> impl Future<Output = Result<u64, StoreError>> + Send;

        /// Counts a refused delivery: error, dead, due time, seq, claim.
        fn failed(
            outbox: &Outbox<Self>,
            failure: Failure<'_>,
            retry: fn(&sqlx::Error) -> bool,
        ) -> impl Future<Output = Result<(), StoreError>> + Send;

        /// Microseconds from `now` until the next pending message is due, if any is pending.
        fn due_in(
            outbox: &Outbox<Self>,
            now: i64,
        ) -> impl Future<Output = Result<Option<i64>, StoreError>> + Send;

        /// Dead messages, oldest first.
        fn dead_messages(
            outbox: &Outbox<Self>,
            limit: usize,
        ) -> impl Future<Output = Result<Vec<DeadMessage>, StoreError>> + Send;

        /// Makes the dead message `id` pending again, due at `now`.
        fn revive_dead(
            outbox: &Outbox<Self>,
            id: &str,
            now: i64,
        ) -> impl Future<Output = Result<bool, StoreError>> + Send;

        /// Messages per state, claimed and due judged at the bound time `now`.
        fn count(
            outbox: &Outbox<Self>,
            now: i64,
        ) -> impl Future<Output = Result<OutboxCounts, StoreError>> + Send;

        /// Deletes up to `limit` messages sent before `before`, copying them to `archive`
        /// first; how many it deleted.
        fn purge(
            outbox: &Outbox<Self>,
            place: PurgePlace,
            before: i64,
            limit: usize,
            archive: &mut Archive,
        ) -> impl Future<Output = Result<u64, StoreError>> + Send;
    }

    /// A refused delivery, as `mark_failed` binds it.
    #[derive(Clone, Copy)]
    pub struct Failure<'a> {
        /// The reason.
        pub error: &'a str,
        /// Whether it was the last allowed attempt.
        pub dead: bool,
        /// When it is due again (a [`moment`]).
        pub due: i64,
        /// The message.
        pub seq: i64,
        /// The claim it was delivered under.
        pub claim: i64,
    }

    impl<DB> OutboxShared for DB
    where
        DB: Database + Sync,
        for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
        for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
        i64: for<'q> Encode<'q, DB> + Type<DB>,
        bool: for<'q> Encode<'q, DB> + Type<DB>,
        for<'q> &'q str: Encode<'q, DB> + Type<DB>,
        (i64,): for<'r> FromRow<'r, DB::Row>,
        (Option<i64>,): for<'r> FromRow<'r, DB::Row>,
        CountsRow: for<'r> FromRow<'r, DB::Row>,
        DeadRow: for<'r> FromRow<'r, DB::Row>,
        ArchivedRow: for<'r> FromRow<'r, DB::Row>,
        DB::QueryResult: RowsAffected,
    {
        async fn with_seqs(
            outbox: &Outbox<Self>,
            sql: &str,
            leading: [i64; 2],
            seqs: &[i64],
            retry: fn(&sqlx::Error) -> bool,
        ) -> Result<u64, StoreError> {
            if seqs.is_empty() {
                return Ok(0);
            }
            let mut round = 1;
            loop {
                let mut statement = sql.to_owned();
                let mut args = DB::Arguments::default();
                for value in leading {
                    args.add(value).map_err(codec)?;
                }
                in_list_after::<DB>(&mut statement, &mut args, seqs)?;
                match sqlx::query_with(&statement, args)
                    .execute(&outbox.pool)
                    .await
                {
                    Err(error) if retry(&error) && round < DEADLOCK_ROUNDS => round += 1,
                    done => return Ok(done.map_err(map_err)?.rows()),
                }
            }
        }

        async fn failed(
            outbox: &Outbox<Self>,
            failure: Failure<'_>,
            retry: fn(&sqlx::Error) -> bool,
        ) -> Result<(), StoreError> {
            let mut round = 1;
            loop {
                let done = sqlx::query(&outbox.sql.mark_failed)
                    .bind(failure.error)
                    .bind(failure.dead)
                    .bind(failure.due)
                    .bind(failure.seq)
                    .bind(failure.claim)
                    .execute(&outbox.pool)
                    .await;
                match done {
                    Err(error) if retry(&error) && round < DEADLOCK_ROUNDS => round += 1,
                    done => return done.map(|_| ()).map_err(map_err),
                }
            }
        }

        async fn due_in(outbox: &Outbox<Self>, now: i64) -> Result<Option<i64>, StoreError> {
            sqlx::query_scalar(&outbox.sql.next_due)
                .bind(now)
                .fetch_one(&outbox.pool)
                .await
                .map_err(map_err)
        }

        async fn dead_messages(
            outbox: &Outbox<Self>,
            limit: usize,
        ) -> Result<Vec<DeadMessage>, StoreError> {
            let rows: Vec<DeadRow> = sqlx::query_as(&outbox.sql.dead)
                .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                .fetch_all(&outbox.pool)
                .await
                .map_err(map_err)?;
            Ok(rows.into_iter().map(DeadRow::dead).collect())
        }

        async fn revive_dead(
            outbox: &Outbox<Self>,
            id: &str,
            now: i64,
        ) -> Result<bool, StoreError> {
            let done = sqlx::query(&outbox.sql.revive)
                .bind(now)
                .bind(id)
                .execute(&outbox.pool)
                .await
                .map_err(map_err)?;
            Ok(done.rows() == 1)
        }

        async fn count(outbox: &Outbox<Self>, now: i64) -> Result<OutboxCounts, StoreError> {
            let row: CountsRow = sqlx::query_as(&outbox.sql.counts)
                .bind(now)
                .fetch_one(&outbox.pool)
                .await
                .map_err(map_err)?;
            Ok(OutboxCounts::of_row(row))
        }

        async fn purge(
            outbox: &Outbox<Self>,
            place: PurgePlace,
            before: i64,
            limit: usize,
            archive: &mut Archive,
        ) -> Result<u64, StoreError> {
            let (pool, sql) = (&outbox.pool, &outbox.sql);
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
                create_archive::<DB>(outbox, place, name).await?;
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
                let messages: Vec<ArchivedMessage> =
                    rows.into_iter().map(|row| row.archived(now)).collect();
                // Written and flushed before the delete: a failure from here on leaves the
                // rows, archived again by the next purge (at least once).
                idempotency_sql::support::write_json_lines(archive, &messages)?;
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
                let mut copy = format!(
                    "INSERT INTO {open}{name}{close} SELECT o.*, {} FROM {open}{table}{close} o \
                     WHERE o.seq IN (",
                    place.now
                );
                let mut args = DB::Arguments::default();
                in_list_after::<DB>(&mut copy, &mut args, &seqs)?;
                sqlx::query_with(&copy, args)
                    .execute(&mut *tx)
                    .await
                    .map_err(map_err)?;
            }
            let mut delete = format!("DELETE FROM {open}{table}{close} WHERE seq IN (");
            let mut args = DB::Arguments::default();
            in_list_after::<DB>(&mut delete, &mut args, &seqs)?;
            let deleted = sqlx::query_with(&delete, args)
                .execute(&mut *tx)
                .await
                .map_err(map_err)?
                .rows();
            tx.commit().await.map_err(map_err)?;
            Ok(deleted)
        }
    }
}

use sealed::{Failure, PurgePlace};

/// The statement text's own error (or a value that would not encode) as a codec error.
pub(crate) fn codec(error: sqlx::error::BoxDynError) -> StoreError {
    StoreError::Codec(error.to_string().into())
}

/// Creates the archive table `name` (the outbox table's columns and `archived_at`) once per
/// outbox handle.
async fn create_archive<DB>(
    outbox: &Outbox<DB>,
    place: PurgePlace,
    name: &str,
) -> Result<(), StoreError>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
{
    let sql = &outbox.sql;
    validate_identifier(name)?;
    if name == sql.table {
        return Err(StoreError::Config(
            "the archive table must not be the outbox table".to_owned(),
        ));
    }
    let made = sql
        .archives
        .lock()
        .map(|names| names.iter().any(|made| made == name))
        .unwrap_or(false);
    if made {
        return Ok(());
    }
    let (open, close) = place.quote;
    let create = format!(
        "CREATE TABLE IF NOT EXISTS {open}{name}{close} AS SELECT o.*, {} AS archived_at \
         FROM {open}{}{close} o WHERE 1 = 0",
        place.now, sql.table
    );
    sqlx::query(&create)
        .execute(&outbox.pool)
        .await
        .map_err(map_err)?;
    if let Ok(mut names) = sql.archives.lock() {
        names.push(name.to_owned());
    }
    Ok(())
}

/// Appends to `sql` (ending in `IN (`) a placeholder per sequence number and `)`, each bound
/// in `args` after what it holds.
pub(crate) fn in_list_after<'q, DB>(
    sql: &mut String,
    args: &mut DB::Arguments<'q>,
    seqs: &[i64],
) -> Result<(), StoreError>
where
    DB: Database,
    i64: Encode<'q, DB> + Type<DB>,
{
    for (index, seq) in seqs.iter().enumerate() {
        if index > 0 {
            sql.push_str(", ");
        }
        args.add(*seq).map_err(codec)?;
        args.format_placeholder(sql)
            .map_err(|error| StoreError::Codec(error.to_string().into()))?;
    }
    sql.push(')');
    Ok(())
}

/// The outbox on every database: its own claim, clock and wake-ups, the rest alike.
impl<DB: super::OutboxDatabase> OutboxTable for Outbox<DB> {
    fn table_name(&self) -> &str {
        &self.sql.table
    }

    async fn claim(&self, batch: ClaimBatch) -> Result<Vec<Claimed>, StoreError> {
        DB::claim(self, batch).await
    }

    async fn mark_sent(&self, claim: i64, seqs: &[i64]) -> Result<u64, StoreError> {
        let leading = [moment::<DB>(0), claim];
        DB::with_seqs(self, &self.sql.mark_sent, leading, seqs, DB::retryable).await
    }

    async fn mark_failed(
        &self,
        claim: i64,
        seq: i64,
        error: &str,
        retry_in: Duration,
        dead: bool,
    ) -> Result<(), StoreError> {
        let failure = Failure {
            error,
            dead,
            due: moment::<DB>(span(retry_in)),
            seq,
            claim,
        };
        DB::failed(self, failure, DB::retryable).await
    }

    async fn release(
        &self,
        claim: i64,
        seqs: &[i64],
        retry_in: Duration,
    ) -> Result<(), StoreError> {
        let leading = [moment::<DB>(span(retry_in)), claim];
        DB::with_seqs(self, &self.sql.release, leading, seqs, DB::retryable).await?;
        Ok(())
    }

    async fn extend(&self, claim: i64, seqs: &[i64], lease: Duration) -> Result<u64, StoreError> {
        let leading = [moment::<DB>(span(lease)), claim];
        DB::with_seqs(self, &self.sql.extend, leading, seqs, DB::retryable).await
    }

    async fn next_due(&self) -> Result<Option<Duration>, StoreError> {
        let due = DB::due_in(self, moment::<DB>(0)).await?;
        Ok(due.map(|micros| Duration::from_micros(u64::try_from(micros).unwrap_or(0))))
    }

    async fn listen(&self) -> Result<Notifications, StoreError> {
        DB::listen(self).await
    }

    async fn purge_sent(
        &self,
        older_than: Duration,
        limit: usize,
        archive: &mut Archive,
    ) -> Result<u64, StoreError> {
        let place = DB::purge_place(self).await?;
        let before = moment::<DB>(span(older_than).saturating_neg());
        DB::purge(self, place, before, limit, archive).await
    }

    async fn dead(&self, limit: usize) -> Result<Vec<DeadMessage>, StoreError> {
        DB::dead_messages(self, limit).await
    }

    async fn revive(&self, id: &str) -> Result<bool, StoreError> {
        DB::revive_dead(self, id, moment::<DB>(0)).await
    }

    async fn counts(&self) -> Result<OutboxCounts, StoreError> {
        DB::count(self, moment::<DB>(0)).await
    }
}
