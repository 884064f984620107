//! [`SqlStore`], the one SQL store, generic over its [`Dialect`], and what a database brings to
//! it: its statements and the steps that differ, over the statements every database runs alike.
//! The store's type is declared beside the dialect traits whose steps take it; what it does is in
//! `store`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use sqlx::Pool;

use super::common::{Settings, micros, owned, token_param};
use super::schema::{Steps, Versions};
use super::tx::{TxClaim, TxClaimRequest, TxLease};
use idempotency_core::{
    Claim, ClaimRequest, FencingToken, Outcome, RecordState, StorageKey, StoreError,
};

/// A [`Store`](idempotency_core::Store) on a SQL database through sqlx, also usable inside the caller's transactions
/// ([`TxStore`](super::TxStore)). Named by its database: [`PostgresStore`](super::PostgresStore),
/// [`MySqlStore`](super::MySqlStore), [`SqliteStore`](super::SqliteStore), whose docs say how
/// each claims, waits and keeps time.
///
/// Every SQL store has the same settings: [`new`](Self::new) on a pool, the table name, the
/// lease, TTL and in-flight policy of transactional claims, the abandoned grace and whether
/// previous keys are read; [`migrate`](Self::migrate) once at start-up, [`list`](Self::list) for
/// reconciliation.
pub struct SqlStore<D: Dialect> {
    pub(super) pool: Pool<D>,
    pub(super) settings: Settings,
    pub(super) sql: Arc<TableSql<D::Own>>,
}

impl<D: Dialect> Clone for SqlStore<D> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            settings: self.settings.clone(),
            sql: Arc::clone(&self.sql),
        }
    }
}

impl<D: Dialect> std::fmt::Debug for SqlStore<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlStore")
            .field("database", &D::NAME)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

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
    /// Stores the outcome of an owned record, binding [`Steps::COMPLETE`](sealed::Steps::COMPLETE).
    pub(crate) complete: String,
    /// Renews the lease of an owned record, binding [`Steps::TOUCH`](sealed::Steps::TOUCH).
    pub(crate) touch: String,
    /// Checkpoints a run with steps on an owned record and renews its lease (on PostgreSQL and
    /// MySQL once half of it is spent, so most checkpoints leave the indexed columns alone), binding
    /// [`Steps::CHECKPOINT`](sealed::Steps::CHECKPOINT) (the progress as the body).
    pub(crate) checkpoint: String,
    /// Ends the lease of an in-progress record at once (a takeover of a run whose owner is
    /// known to be gone): key.
    pub(crate) expire: String,
    /// An operator's resume of an in-progress record: its lease ended, its attempts from 1
    /// (key, token).
    pub(crate) resume: String,
    /// Deletes one bounded batch of purgeable records, binding
    /// [`Steps::PURGE`](sealed::Steps::PURGE).
    pub(crate) purge: String,
    /// The statements the dialect runs its own way (the claims).
    pub(crate) own: Own,
}

pub(crate) mod sealed {
    use super::*;
    use crate::common::map_err;

    /// The steps each database writes its own way: the claims, the migration, how a
    /// transaction begins, and the order complete, touch and purge bind their values in.
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

        /// The versions table, as this database reads and writes it.
        const VERSIONS: Versions<Self>;

        /// The values [`TableSql::complete`] binds, in its placeholders' order.
        const COMPLETE: &'static [Param];

        /// The values [`TableSql::touch`] binds, in its placeholders' order.
        const TOUCH: &'static [Param];

        /// The values [`TableSql::checkpoint`] binds, in its placeholders' order.
        const CHECKPOINT: &'static [Param];

        /// The values [`TableSql::purge`] binds, in its placeholders' order.
        const PURGE: &'static [Param];

        /// The statements of `table` (a validated identifier).
        fn statements(table: &str) -> TableSql<Self::Own>;

        /// Whether a run's hold ([`StepStore::hold`](crate::StepStore::hold)) ends with its
        /// connection; SQLite's is kept in the process.
        const HOLD_ENDS_WITH_CONNECTION: bool = true;

        /// Takes the hold of a run with steps on `key` of `table` on `conn`: `false` while
        /// another owner holds it.
        fn hold_on(
            conn: &mut Self::Connection,
            table: &str,
            key: &StorageKey,
        ) -> impl Future<Output = Result<bool, StoreError>> + Send;

        /// Stores a run's outcome and gives its hold back, on the owner's connection: the
        /// complete, then [`unhold_on`](Self::unhold_on), unless the database does both in one
        /// statement.
        fn complete_unhold_on(
            store: &SqlStore<Self>,
            conn: &mut Self::Connection,
            key: &StorageKey,
            token: FencingToken,
            outcome: &Outcome,
            ttl: Duration,
        ) -> impl Future<Output = Result<(), StoreError>> + Send {
            async move {
                Self::complete_on(store, conn, key, token, outcome, ttl).await?;
                Self::unhold_on(conn, store.table_name(), key).await
            }
        }

        /// Takes the hold of a run with steps on `request.key` and claims it, on the owner's
        /// connection: whether the hold was taken, and the claim (`None`: another owner holds
        /// the key). With the hold, an in-progress run whose hold ended with its owner's
        /// connection is taken over at once, unless another payload's checkpoints are on it.
        /// The hold, a read, then the claim (a takeover ends the lease and claims again),
        /// unless the database does it in fewer statements.
        fn start_on(
            store: &SqlStore<Self>,
            conn: &mut Self::Connection,
            request: ClaimRequest<'_>,
        ) -> impl Future<Output = Result<(bool, Option<Claim>), StoreError>> + Send {
            async move {
                if !Self::hold_on(conn, store.table_name(), request.key).await? {
                    return Ok((false, None));
                }
                Ok((true, Some(Self::claim_held_on(store, conn, request).await?)))
            }
        }

        /// Waits up to `wait` for the hold on `key` that a live owner has: `true` once taken
        /// (its owner completed, paused or died), `false` when the wait ran out. `false` at
        /// once where holds are kept in the process (SQLite).
        fn hold_waiting_on(
            conn: &mut Self::Connection,
            table: &str,
            key: &StorageKey,
            wait: Duration,
        ) -> impl Future<Output = Result<bool, StoreError>> + Send;

        /// Claims `request.key`, which `conn` holds: an in-progress run whose hold ended with
        /// its owner's connection is taken over at once, unless another payload's checkpoints
        /// are on it (a mismatch). A read, then the claim (a takeover ends the lease and
        /// claims again), unless the database does it in one statement.
        fn claim_held_on(
            store: &SqlStore<Self>,
            conn: &mut Self::Connection,
            request: ClaimRequest<'_>,
        ) -> impl Future<Output = Result<Claim, StoreError>> + Send {
            async move {
                // Another payload never resumes a run's checkpoints: a mismatch (the claim
                // would take an ended lease over whatever the payload).
                if let Some(record) = idempotency_core::Store::get(store, request.key).await?
                    && record.state == RecordState::InProgress
                    && record.progress.is_some()
                    && record.fingerprint != *request.fingerprint
                {
                    return Ok(Claim::Mismatch);
                }
                let mut claim = Self::claim_on(store, conn, request).await?;
                if matches!(claim, Claim::InProgress { .. }) && Self::HOLD_ENDS_WITH_CONNECTION {
                    let values = Values {
                        key: request.key.0.as_slice(),
                        ..Values::default()
                    };
                    Self::bound_in_order(conn, &store.sql.expire, &[Param::Key], values).await?;
                    claim = Self::claim_on(store, conn, request).await?;
                }
                Ok(claim)
            }
        }

        /// Gives the hold of [`hold_on`](Self::hold_on) back.
        fn unhold_on(
            conn: &mut Self::Connection,
            table: &str,
            key: &StorageKey,
        ) -> impl Future<Output = Result<(), StoreError>> + Send;

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
        ) -> impl Future<Output = Result<(), StoreError>> + Send {
            async move {
                let values = Values {
                    key: key.0.as_slice(),
                    token: token_param(token)?,
                    status: i32::from(outcome.status),
                    body: outcome.body.as_ref(),
                    span: micros(ttl),
                    ..Values::default()
                };
                let sql = &store.sql.complete;
                owned(Self::bound_in_order(conn, sql, Self::COMPLETE, values).await?)
            }
        }

        /// Completes a transactional claim on its transaction's connection.
        fn complete_in_tx_on(
            store: &SqlStore<Self>,
            conn: &mut Self::Connection,
            lease: &TxLease,
            outcome: &Outcome,
        ) -> impl Future<Output = Result<(), StoreError>> + Send {
            Self::complete_on(
                store,
                conn,
                &lease.key,
                lease.lease.token,
                outcome,
                lease.ttl,
            )
        }

        /// Inserts the record of a new `request.key` completed with `outcome`, at the end of
        /// its transaction ([`TxStore::record_in_tx`](crate::TxStore::record_in_tx)), where the
        /// database does it in one statement: whether it was written. `false` (the default, or
        /// a key that has a record): the caller claims the key, then completes it.
        fn insert_recorded_on(
            store: &SqlStore<Self>,
            conn: &mut Self::Connection,
            request: TxClaimRequest<'_>,
            outcome: &Outcome,
        ) -> impl Future<Output = Result<bool, StoreError>> + Send {
            let _ = (store, conn, request, outcome);
            std::future::ready(Ok(false))
        }

        /// A receiver of `key`'s wake-ups ([`Store::wake_ups`](idempotency_core::Store::wake_ups)):
        /// `None` where the database wakes no waiter.
        fn wake_ups(
            store: &SqlStore<Self>,
            key: &StorageKey,
        ) -> impl Future<Output = Option<tokio::sync::watch::Receiver<()>>> + Send {
            let _ = (store, key);
            std::future::ready(None)
        }

        /// Renews the lease of an owned record.
        fn touch(
            store: &SqlStore<Self>,
            key: &StorageKey,
            token: FencingToken,
            lease: Duration,
        ) -> impl Future<Output = Result<(), StoreError>> + Send {
            async move {
                let values = Values {
                    key: key.0.as_slice(),
                    token: token_param(token)?,
                    span: micros(lease),
                    ..Values::default()
                };
                let mut conn = store.pool.acquire().await.map_err(map_err)?;
                let sql = &store.sql.touch;
                owned(Self::bound_in_order(&mut conn, sql, Self::TOUCH, values).await?)
            }
        }

        /// One bounded delete of purgeable records.
        fn purge(
            store: &SqlStore<Self>,
            limit: usize,
        ) -> impl Future<Output = Result<u64, StoreError>> + Send {
            async move {
                let values = Values {
                    limit: i64::try_from(limit).unwrap_or(i64::MAX),
                    grace: micros(store.settings.abandoned_grace),
                    floor: micros(store.floor().await?),
                    ..Values::default()
                };
                let mut conn = store.pool.acquire().await.map_err(map_err)?;
                Self::bound_in_order(&mut conn, &store.sql.purge, Self::PURGE, values).await
            }
        }

        /// Brings the table to this release's schema, serialized against concurrent migrations.
        fn migrate(store: &SqlStore<Self>) -> impl Future<Output = Result<(), StoreError>> + Send;

        /// The record TTL the table was configured with, as a store's `migrate` recorded it
        /// (zero where none is).
        fn recorded_ttl(
            store: &SqlStore<Self>,
        ) -> impl Future<Output = Result<Duration, StoreError>> + Send {
            Self::read_ttl(&store.pool, &Self::VERSIONS, store.table_name())
        }

        /// The SQL text of one statement by name, for benchmarks that run it through raw sqlx:
        /// `complete`, `get`, or one of the dialect's own ([`own_statement`](Self::own_statement)).
        #[cfg(feature = "testing")]
        fn statement<'a>(sql: &'a TableSql<Self::Own>, name: &str) -> Option<&'a str> {
            match name {
                "complete" => Some(&sql.complete),
                "get" => Some(&sql.get),
                _ => Self::own_statement(&sql.own, name),
            }
        }

        /// The SQL text of one of the dialect's own statements by name.
        #[cfg(feature = "testing")]
        fn own_statement<'a>(own: &'a Self::Own, name: &str) -> Option<&'a str>;
    }

    mod params;
    mod shared;
    pub(crate) use params::{Clock, Order, Param, PurgeBatch, PurgeSql, Values};
    pub(crate) use shared::Shared;

    // Here rather than beside `Clock`: it reads the constants of `Steps`, and `params` stays a
    // leaf below this file.
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
    }
}
