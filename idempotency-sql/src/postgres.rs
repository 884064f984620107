//! The PostgreSQL store: one statement per step, a sequence for fencing tokens.

mod runs;
mod statements;
mod wake_ups;

use std::time::Duration;

use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::QueryAs;
use sqlx::{FromRow, PgConnection, Postgres};

use super::common::{ClaimRow, map_err, micros, owned, token_param};
use super::dialect::sealed::{Param, Param::*, Shared, Steps, Values};
use super::dialect::{SqlStore, TableSql};
use super::schema::{self, VersionSql, Versions};
use super::tx::{TxClaim, TxClaimRequest, still_running, tx_claim};
use idempotency_core::{
    Claim, ClaimId, ClaimRequest, FencingToken, Lease, Mechanism, StorageKey, StoreError,
};

/// SQLSTATE `lock_not_available`: a bounded wait (`lock_timeout`) ran out.
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// The schema versions table on PostgreSQL.
const VERSIONS: VersionSql = VersionSql {
    create: "CREATE TABLE IF NOT EXISTS idempotency_schema (table_name TEXT PRIMARY KEY, \
             version BIGINT NOT NULL, migrated_at TIMESTAMPTZ NOT NULL DEFAULT now())",
    read: "SELECT version FROM idempotency_schema WHERE table_name = $1",
    exists: "SELECT 1::bigint FROM pg_class WHERE oid = to_regclass(quote_ident($1))",
    write: "INSERT INTO idempotency_schema (table_name, version) VALUES ($1, $2) \
            ON CONFLICT (table_name) DO UPDATE SET version = excluded.version, migrated_at = now()",
    add_ttl: "ALTER TABLE idempotency_schema ADD COLUMN IF NOT EXISTS record_ttl_us BIGINT",
    write_ttl: "UPDATE idempotency_schema SET record_ttl_us = $1 WHERE table_name = $2",
    read_ttl: "SELECT record_ttl_us FROM idempotency_schema WHERE table_name = $1",
};

/// Brings `table` to the latest version of `steps` in one transaction, serialized by an
/// advisory lock (record tables and outbox tables alike). The lock is one for every table: they
/// share the versions table, whose `CREATE TABLE IF NOT EXISTS` two first migrations running at
/// once would both attempt (the loser failing on `pg_type`'s unique index).
pub async fn migrate_table(
    pool: &sqlx::PgPool,
    table: &str,
    steps: &schema::Steps,
    ttl: Option<Duration>,
) -> Result<(), StoreError> {
    let mut tx = pool.begin().await.map_err(map_err)?;
    // No argument for a statement that takes none: the application may have prepared this
    // same text without one on the connection.
    sqlx::query("SET LOCAL client_min_messages = warning")
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('idempotency-migrate'))")
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
    Postgres::VERSIONS
        .migrate(&mut tx, table, steps, ttl)
        .await?;
    tx.commit().await.map_err(map_err)
}

/// A [`Store`](idempotency_core::Store) on PostgreSQL (sqlx), also usable inside the caller's
/// transactions ([`TxStore`](super::TxStore)); settings and `migrate` on [`SqlStore`].
///
/// - **Clock**: every lease and TTL comparison uses the database's `statement_timestamp()`, so
///   application servers with skewed clocks agree; operations (purge, counts, listings) too.
/// - **Statements**: [`claim`](idempotency_core::Store::claim) is *one* statement (a replay too):
///   `WITH cur AS (SELECT …), ins AS (INSERT … ON CONFLICT DO UPDATE …) SELECT … FROM ins UNION ALL
///   SELECT … FROM cur`. A live row visible in the statement's snapshot is answered without any
///   write; an absent or expired key is inserted or taken over; a row that appeared after the
///   snapshot (a concurrent insert, waited for on the primary key) is locked by a no-op update
///   and its latest version returned. `complete`, `touch`, `release`, `get` and
///   `purge_expired` are one statement each.
/// - **Fencing tokens** come from a sequence (`<table>_token_seq`), so they never go backwards,
///   also after a release, an expiry or a restart.
/// - **Transactions**: use the default `READ COMMITTED` isolation for transactional claims;
///   under `REPEATABLE READ`/`SERIALIZABLE` a concurrent duplicate fails with a serialization
///   error instead of replaying (retry the transaction).
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use idempotency_core::Idempotency;
/// use idempotency_sql::PostgresStore;
/// let pool = sqlx::PgPool::connect("postgres://postgres@127.0.0.1:5432/test").await?;
/// let store = PostgresStore::new(pool).with_table_name("payment_dedup")?;
/// store.migrate().await?;
/// let engine = Idempotency::new(store);
/// # let _ = engine; Ok(()) }
/// ```
pub type PostgresStore = SqlStore<Postgres>;

impl PostgresStore {
    /// Whether duplicates waiting for a key in flight elsewhere are woken by the database
    /// (default on): the first waiter of a key in a process flags its record, and the
    /// completion or release of a flagged record sends a `NOTIFY` on the table's channel, which
    /// the store's one listener (a connection of its pool, opened by the first wait) hears.
    /// Unflagged records send none, so a `NOTIFY`'s cost falls on contended keys only. Off:
    /// waiters poll ([`Config::in_flight_poll`](idempotency_core::Config::in_flight_poll)), as
    /// behind a pooler that does not keep `LISTEN` (PgBouncer in transaction mode).
    pub fn with_wake_ups(mut self, enabled: bool) -> Self {
        self.settings.wake_ups = enabled;
        self
    }
}

/// PostgreSQL's own statements, built once per table name.
pub struct Sql {
    claim: String,
    /// The claim inside a transaction: the same statement, with its wait on a concurrent
    /// claimer's uncommitted row bounded by `lock_timeout` ($6), which it sets and restores.
    claim_bounded: String,
    /// The first step of a claim inside a transaction: a plain insert of a fresh key (cheap to
    /// plan and to run, the common case), its wait bounded as `claim_bounded`'s; the token it
    /// returns is `NULL` when the key exists, which `claim_bounded` then decides.
    insert_fresh: String,
    /// A run's start (crate `idempotency-steps`): takes the hold and, with it, inserts a fresh
    /// key (a plain insert, the common case); returns `held` and the token, `NULL` when the key
    /// exists, which `start_held` then decides.
    start: String,
    /// A run's claim of an existing key, under the hold `start` took: a run whose owner is gone
    /// is taken over at once.
    start_held: String,
    /// One `INSERT … ON CONFLICT DO NOTHING` of a record written after the business writes of
    /// its transaction ([`TxStore::record_in_tx`](crate::TxStore::record_in_tx)): completed,
    /// with its outcome, its expiry the TTL away; nothing when the key exists, which
    /// `claim_bounded` then decides.
    insert_recorded: String,
    /// A waiter's flag on an in-progress record: its completion or release is notified
    /// ([`wake_ups`]).
    flag: String,
    /// The listener of the table's channel, started by the first wait.
    wake_ups: wake_ups::WakeUps,
    /// `complete` that also gives the run's hold back (`pg_advisory_unlock` of the key's first
    /// eight bytes, as [`crate::steps`] takes it), in the same round trip.
    complete_unhold: String,
}

const NOW: &str = "statement_timestamp()";

/// The columns a claim writes when it takes a record over, and their values.
const TAKEOVER: &[(&str, &str)] = &[
    ("namespace", "excluded.namespace"),
    ("fingerprint", "excluded.fingerprint"),
    ("state", "'in_progress'"),
    ("token", "excluded.token"),
    ("claim_id", "excluded.claim_id"),
    ("mechanism", "excluded.mechanism"),
    ("key_derivation", "excluded.key_derivation"),
    (
        "attempts",
        "CASE WHEN r.state = 'in_progress' THEN r.attempts + 1 ELSE 1 END",
    ),
    (
        "created_at",
        "CASE WHEN r.state = 'in_progress' THEN r.created_at ELSE excluded.created_at END",
    ),
    ("updated_at", "excluded.updated_at"),
    // A takeover resumes the run's checkpoints; a new run after completion starts bare.
    (
        "progress",
        "CASE WHEN r.state = 'in_progress' THEN r.progress ELSE NULL END",
    ),
    ("completed_at", "NULL"),
    ("expires_at", "excluded.expires_at"),
    ("response_status", "NULL"),
    ("response_body", "NULL"),
    ("conflicts", "0"),
    ("last_conflict_at", "NULL"),
];

/// `sql` (`insert_fresh` or `claim_bounded`) with the values of a transactional claim bound:
/// key, namespace, fingerprint, lease, a fresh claim id (never undone: the transaction rolls a
/// failed claim back), the lock wait, what wrote the record.
fn tx_claim_query<'q, O>(
    sql: &'q str,
    request: TxClaimRequest<'q>,
    wait: &'q str,
) -> QueryAs<'q, Postgres, O, PgArguments>
where
    O: for<'r> FromRow<'r, PgRow>,
{
    sqlx::query_as(sql)
        .bind(request.key.0.as_slice())
        .bind(request.namespace)
        .bind(request.fingerprint.0.as_slice())
        .bind(micros(request.lease))
        .bind(ClaimId::random().as_bytes().to_vec())
        .bind(wait)
        .bind(request.mechanism.map(Mechanism::as_str))
        .bind(request.key_derivation.map(i16::from))
}

impl Steps for Postgres {
    type Own = Sql;

    const LIST_TIME: (&'static str, &'static str) =
        ("", " * interval '1 microsecond' + TIMESTAMPTZ 'epoch'");

    const LOCK_ROWS: &'static str = " FOR UPDATE SKIP LOCKED";
    const NOW: &'static str = NOW;
    const CLOCK_MINUS: Option<(&'static str, &'static str)> =
        Some(("(statement_timestamp() - ", " * interval '1 microsecond')"));
    const SERIAL_KEY: &'static str = "BIGSERIAL PRIMARY KEY";
    const MICROS: (&'static str, &'static str) = ("(EXTRACT(EPOCH FROM ", ") * 1000000)::bigint");
    const VERSIONS: Versions<Self> = Versions::new(&VERSIONS);
    const COMPLETE: &'static [Param] = &[Key, Token, Status, Body, Span];
    const TOUCH: &'static [Param] = &[Key, Token, Span];
    const CHECKPOINT: &'static [Param] = &[Key, Token, Body, Span];
    const PURGE: &'static [Param] = &[Limit, Grace, Floor];

    fn statements(table: &str) -> TableSql<Sql> {
        statements::statements(table)
    }

    async fn hold_on(
        conn: &mut PgConnection,
        _table: &str,
        key: &StorageKey,
    ) -> Result<bool, StoreError> {
        let (held,): (bool,) = sqlx::query_as("SELECT pg_try_advisory_lock($1)")
            .bind(crate::steps::lock_id(key))
            .fetch_one(conn)
            .await
            .map_err(map_err)?;
        Ok(held)
    }

    async fn complete_unhold_on(
        store: &PostgresStore,
        conn: &mut PgConnection,
        key: &StorageKey,
        token: FencingToken,
        outcome: &idempotency_core::Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let values = Values {
            key: key.0.as_slice(),
            token: token_param(token)?,
            status: i32::from(outcome.status),
            body: outcome.body.as_ref(),
            span: micros(ttl),
            ..Values::default()
        };
        let sql = &store.sql.own.complete_unhold;
        owned(Self::bound_in_order(conn, sql, Self::COMPLETE, values).await?)
    }

    /// One `INSERT … ON CONFLICT DO NOTHING`: the record completed, with its outcome; nothing
    /// for a key that has a record.
    async fn insert_recorded_on(
        store: &PostgresStore,
        conn: &mut PgConnection,
        request: TxClaimRequest<'_>,
        outcome: &idempotency_core::Outcome,
    ) -> Result<bool, StoreError> {
        let inserted = sqlx::query(&store.sql.own.insert_recorded)
            .bind(request.key.0.as_slice())
            .bind(request.namespace)
            .bind(request.fingerprint.0.as_slice())
            .bind(micros(request.ttl))
            .bind(request.mechanism.map(Mechanism::as_str))
            .bind(request.key_derivation.map(i16::from))
            .bind(i32::from(outcome.status))
            .bind(outcome.body.as_ref())
            .execute(&mut *conn)
            .await
            .map_err(map_err)?;
        Ok(inserted.rows_affected() == 1)
    }

    /// The table's listener subscribed to `key`, then the record flagged (its completion or
    /// release is notified from now on); `None` (waiters poll) if either fails.
    async fn wake_ups(
        store: &PostgresStore,
        key: &StorageKey,
    ) -> Option<tokio::sync::watch::Receiver<()>> {
        if !store.settings.wake_ups {
            return None;
        }
        let own = &store.sql.own;
        let woken = own
            .wake_ups
            .subscribe(&store.pool, store.table_name(), key)
            .await?;
        let flagged = sqlx::query(&own.flag)
            .bind(key.0.as_slice())
            .execute(&store.pool)
            .await;
        match flagged {
            Ok(_) => Some(woken),
            Err(error) => {
                tracing::debug!(%error, "a waiter's flag was not written; it polls");
                None
            }
        }
    }

    async fn unhold_on(
        conn: &mut PgConnection,
        _table: &str,
        key: &StorageKey,
    ) -> Result<(), StoreError> {
        sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(crate::steps::lock_id(key))
            .execute(conn)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    #[cfg(feature = "testing")]
    fn own_statement<'a>(own: &'a Sql, name: &str) -> Option<&'a str> {
        (name == "claim").then_some(own.claim.as_str())
    }

    async fn migrate(store: &PostgresStore) -> Result<(), StoreError> {
        let ttl = store.settings.table_ttl;
        migrate_table(&store.pool, store.table_name(), &store.sql.steps, ttl).await
    }

    /// A fresh key is inserted by one plain statement; a key that exists is decided by the
    /// claim statement. Each waits on a concurrent claimer's uncommitted row as long as
    /// `lock_timeout` allows (1 ms to reject at once); a wait that ran out is in flight.
    async fn claim_in_tx_on(
        store: &PostgresStore,
        conn: &mut PgConnection,
        request: TxClaimRequest<'_>,
    ) -> Result<TxClaim, StoreError> {
        let sql = &store.sql.own;
        let millis = request.in_flight.max_wait().as_millis().max(1);
        let wait = format!("{millis}ms");
        let fresh: Result<(Option<i64>, String), sqlx::Error> =
            tx_claim_query(&sql.insert_fresh, request, &wait)
                .fetch_one(&mut *conn)
                .await;
        match fresh {
            Ok((Some(token), _)) => {
                let lease = Lease {
                    token: FencingToken::new(u64::try_from(token).map_err(|_| {
                        StoreError::Codec(format!("token out of range: {token}").into())
                    })?),
                    attempt: 1,
                    took_over: false,
                };
                return Ok(tx_claim(Claim::Acquired(lease), &request));
            }
            Ok((None, _)) => {}
            Err(sqlx::Error::Database(error))
                if error.code().as_deref() == Some(LOCK_NOT_AVAILABLE) =>
            {
                return Ok(still_running());
            }
            Err(error) => return Err(map_err(error)),
        }
        let row: Result<Option<ClaimRow>, sqlx::Error> =
            tx_claim_query(&sql.claim_bounded, request, &wait)
                .fetch_optional(conn)
                .await;
        match row {
            Ok(Some(row)) => Ok(tx_claim(row.into_claim(request.fingerprint)?, &request)),
            Ok(None) => Err(StoreError::Backend(
                "claim statement returned no row".into(),
            )),
            Err(sqlx::Error::Database(error))
                if error.code().as_deref() == Some(LOCK_NOT_AVAILABLE) =>
            {
                Ok(still_running())
            }
            Err(error) => Err(map_err(error)),
        }
    }

    /// The hold and the claim in one statement.
    async fn start_on(
        store: &PostgresStore,
        conn: &mut PgConnection,
        request: ClaimRequest<'_>,
    ) -> Result<(bool, Option<Claim>), StoreError> {
        let (held, token): (bool, Option<i64>) = claim_query(&store.sql.own.start, &request)
            .fetch_one(&mut *conn)
            .await
            .map_err(map_err)?;
        if !held {
            return Ok((false, None));
        }
        if let Some(token) = token {
            let token =
                FencingToken::new(u64::try_from(token).map_err(|_| {
                    StoreError::Codec(format!("token out of range: {token}").into())
                })?);
            let owner = Lease {
                token,
                attempt: 1,
                took_over: false,
            };
            return Ok((true, Some(Claim::Acquired(owner))));
        }
        Ok((true, Some(Self::claim_held_on(store, conn, request).await?)))
    }

    /// One statement: the takeover's rules are in it.
    async fn claim_held_on(
        store: &PostgresStore,
        conn: &mut PgConnection,
        request: ClaimRequest<'_>,
    ) -> Result<Claim, StoreError> {
        claim_with(&store.sql.own.start_held, conn, request).await
    }

    /// `pg_advisory_lock`, its wait bounded by `lock_timeout` for this statement only.
    async fn hold_waiting_on(
        conn: &mut PgConnection,
        _table: &str,
        key: &StorageKey,
        wait: Duration,
    ) -> Result<bool, StoreError> {
        let millis = wait.as_millis().max(1);
        let held =
            sqlx::query("SELECT set_config('lock_timeout', $2, true), pg_advisory_lock($1)::text")
                .bind(crate::steps::lock_id(key))
                .bind(format!("{millis}ms"))
                .execute(conn)
                .await;
        match held {
            Ok(_) => Ok(true),
            Err(sqlx::Error::Database(error))
                if error.code().as_deref() == Some(LOCK_NOT_AVAILABLE) =>
            {
                Ok(false)
            }
            Err(error) => Err(map_err(error)),
        }
    }

    /// The one claim statement.
    async fn claim_on(
        store: &PostgresStore,
        conn: &mut PgConnection,
        request: ClaimRequest<'_>,
    ) -> Result<Claim, StoreError> {
        claim_with(&store.sql.own.claim, conn, request).await
    }
}

/// Runs the claim statement `sql` (the claim, or a held run's) for `request`: its one row, read
/// for `request`'s fingerprint.
async fn claim_with(
    sql: &str,
    conn: &mut PgConnection,
    request: ClaimRequest<'_>,
) -> Result<Claim, StoreError> {
    let row: Option<ClaimRow> = claim_query(sql, &request)
        .fetch_optional(conn)
        .await
        .map_err(map_err)?;
    match row {
        Some(row) => row.into_claim(request.fingerprint),
        None => Err(StoreError::Backend(
            "claim statement returned no row".into(),
        )),
    }
}

/// The claim statement `sql` (the claim, or a run's start) with `request`'s values bound.
fn claim_query<'q, O>(
    sql: &'q str,
    request: &'q ClaimRequest<'q>,
) -> QueryAs<'q, Postgres, O, PgArguments>
where
    O: for<'r> FromRow<'r, PgRow>,
{
    sqlx::query_as(sql)
        .bind(request.key.0.as_slice())
        .bind(request.namespace)
        .bind(request.fingerprint.0.as_slice())
        .bind(micros(request.lease))
        .bind(request.claim_id.as_bytes().as_slice())
        .bind(request.mechanism.map(Mechanism::as_str))
        .bind(request.key_derivation.map(i16::from))
}
