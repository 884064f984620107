//! What a database brings to [`SqlStore`]: its statements and the steps that differ, over the
//! statements every database runs alike.

use std::future::Future;
use std::time::Duration;

use sqlx::{Arguments, Database, Encode, Executor, FromRow, IntoArguments, Pool, Type};

use super::common::{RecordRow, RowsAffected, map_err, unix_micros};
use super::schema::Steps;
use super::store::SqlStore;
use super::tx::{TxClaim, TxClaimRequest};
use idempotency_core::RecordState;
use idempotency_core::operations::{Archive, AuditEntry, Counts};
use idempotency_core::{
    Claim, ClaimId, ClaimRequest, FencingToken, Outcome, Record, StorageKey, StoreError,
};

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

        /// [`Store::claim`](idempotency_core::Store::claim) on a connection.
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

    mod shared;
    use shared::push_bind;
}
