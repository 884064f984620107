//! The PostgreSQL store: one statement per step, a sequence for fencing tokens.

use std::time::Duration;

use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::QueryAs;
use sqlx::{FromRow, PgConnection, Postgres};

use super::common::{ClaimRow, map_err, micros, owned, token_param};
use super::conflicts::MarkSql;
use super::dialect::sealed::{Param, Param::*, Shared, Steps, Values};
use super::dialect::{SqlStore, TableSql};
use super::schema::{self, VersionSql, Versions};
use super::tx::{TxClaim, TxClaimRequest, TxLease, still_running, tx_claim};
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
    /// `insert_fresh` for a claim completed before its transaction commits
    /// ([`TxClaimRequest::completes_before_commit`](crate::TxClaimRequest)): the record as it
    /// will be once completed (state, times, expiry the TTL, $4, after `completed_at`), its
    /// outcome to come.
    insert_completed: String,
    /// The completion of a record `insert_completed` wrote: its outcome alone, no indexed
    /// column changed (a HOT update where the page has room).
    complete_outcome: String,
    /// `complete` that also gives the run's hold back (`pg_advisory_unlock` of the key's first
    /// eight bytes, as [`crate::steps`] takes it), in the same round trip.
    complete_unhold: String,
}

const NOW: &str = "statement_timestamp()";

fn record_columns() -> String {
    let us = |column: &str| format!("(EXTRACT(EPOCH FROM {column}) * 1000000)::bigint");
    format!(
        "key_hash, namespace, fingerprint, state, token, attempts::bigint AS attempts, \
         {} AS created_us, {} AS updated_us, {} AS completed_us, {} AS expires_us, \
         response_status::bigint AS response_status, response_body, \
         conflicts::bigint AS conflicts, {} AS last_conflict_us, mechanism, \
         key_derivation::bigint AS key_derivation, progress",
        us("created_at"),
        us("updated_at"),
        us("completed_at"),
        us("expires_at"),
        us("last_conflict_at")
    )
}

/// The statements of `table`.
fn statements(table: &str) -> TableSql<Sql> {
    {
        let t = format!("\"{table}\"");
        let seq = format!("\"{table}_token_seq\"");
        let expired = format!("r.expires_at <= {NOW}");
        // Completed past the TTL, or an abandoned lease past its end plus the grace ($2 µs);
        // last written at least the table's configured TTL ($3 µs) ago.
        let purgeable = format!(
            "expires_at <= {NOW} AND (state = 'completed' OR \
             expires_at <= {NOW} - $2 * interval '1 microsecond') \
             AND updated_at <= {NOW} - $3 * interval '1 microsecond'"
        );
        // On conflict: take an expired row over, keep a live one unchanged (the no-op update only
        // happens for a row this statement's snapshot could not see, to return its latest
        // version).
        let takeover = [
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
        ]
        .iter()
        .map(|(column, value)| {
            format!("{column} = CASE WHEN {expired} THEN {value} ELSE r.{column} END")
        })
        .collect::<Vec<_>>()
        .join(", ");
        let answer = |alias: &str, acquired: &str| {
            format!(
                "SELECT {acquired} AS acquired, {alias}.state, {alias}.fingerprint, {alias}.token, \
                 {alias}.attempts::bigint AS attempts, \
                 GREATEST(0, EXTRACT(EPOCH FROM {alias}.expires_at - {NOW}) * 1000000)::bigint \
                 AS remaining_us, {alias}.response_status::bigint AS response_status, \
                 {alias}.response_body"
            )
        };
        let claim = |bounded: bool| {
            // Bounded: `lt` sets the wait before `ins` runs (`tok` reads it), `back` restores the
            // caller's setting after (it reads `ins`), so the business statements that follow in
            // the transaction keep their own lock timeout.
            // What wrote the record: after the lock timeout where there is one.
            let origin = if bounded { "$7, $8" } else { "$6, $7" };
            let (lt, from_lt, back, with_back) = if bounded {
                (
                    "lt AS (SELECT current_setting('lock_timeout') AS old, \
                     set_config('lock_timeout', $6, true) AS new), ",
                    " FROM lt",
                    ", back AS (SELECT set_config('lock_timeout', lt.old, true) AS old FROM lt \
                     WHERE (SELECT count(*) FROM ins) >= 0)",
                    " CROSS JOIN back",
                )
            } else {
                ("", "", "", "")
            };
            format!(
                "WITH {lt}cur AS (\
               SELECT state, fingerprint, token, attempts, expires_at, response_status, \
               response_body FROM {t} WHERE key_hash = $1), \
             tok AS (SELECT nextval('{seq}') AS v{from_lt}), \
             ins AS (\
               INSERT INTO {t} AS r (key_hash, namespace, fingerprint, state, token, claim_id, \
               attempts, created_at, updated_at, expires_at, mechanism, key_derivation) \
               SELECT $1, $2, $3, 'in_progress', tok.v, $5, 1, {NOW}, {NOW}, \
               {NOW} + $4 * interval '1 microsecond', {origin} FROM tok \
               WHERE NOT EXISTS (SELECT 1 FROM cur WHERE cur.expires_at > {NOW}) \
               ON CONFLICT (key_hash) DO UPDATE SET {takeover} \
               RETURNING r.state, r.fingerprint, r.token, r.attempts, r.expires_at, \
               r.response_status, r.response_body){back} \
             {} FROM ins i{with_back} \
             UNION ALL \
             {} FROM cur c{with_back} WHERE NOT EXISTS (SELECT 1 FROM ins)",
                answer("i", "i.token = (SELECT v FROM tok)"),
                answer("c", "false"),
            )
        };
        // `lt` sets the bound before `ins` runs (its `SELECT` reads `lt`); the target list reads
        // `ins` before it restores the caller's setting.
        // In progress with a lease of $4 µs, or (`completed`) as it will be once completed, its
        // expiry $4 µs (the TTL) away.
        let insert_first = |completed: bool| {
            let (state, completed_at, at) = if completed {
                ("completed", ", completed_at", format!(", {NOW}"))
            } else {
                ("in_progress", "", String::new())
            };
            format!(
                "WITH lt AS (SELECT current_setting('lock_timeout') AS old, \
                   set_config('lock_timeout', $6, true) AS new), \
                 ins AS (INSERT INTO {t} (key_hash, namespace, fingerprint, state, token, claim_id, \
                   attempts, created_at, updated_at{completed_at}, expires_at, mechanism, \
                   key_derivation) \
                   SELECT $1, $2, $3, '{state}', nextval('{seq}'), $5, 1, {NOW}, {NOW}{at}, \
                   {NOW} + $4 * interval '1 microsecond', $7, $8 FROM lt \
                   ON CONFLICT (key_hash) DO NOTHING RETURNING token) \
                 SELECT (SELECT token FROM ins) AS token, \
                   set_config('lock_timeout', lt.old, true) AS restored FROM lt"
            )
        };
        let insert_fresh = insert_first(false);
        let owned = "key_hash = $1 AND token = $2 AND state = 'in_progress'";
        let marks = MarkSql::new(&t, "ADD COLUMN IF NOT EXISTS", "TIMESTAMPTZ", NOW, "$1");
        TableSql {
            own: Sql {
                complete_unhold: format!(
                    "UPDATE {t} SET state = 'completed', response_status = $3, response_body = $4, \
                     completed_at = {NOW}, updated_at = {NOW}, \
                     expires_at = {NOW} + $5 * interval '1 microsecond' WHERE {owned} \
                     RETURNING pg_advisory_unlock(\
                       ('x' || encode(substring(key_hash from 1 for 8), 'hex'))::bit(64)::bigint)"
                ),
                insert_fresh,
                insert_completed: insert_first(true),
                // The times stay the claim's: the record is kept its TTL from `completed_at`,
                // and every write of the transaction shows at its commit anyway.
                complete_outcome: format!(
                    "UPDATE {t} SET response_status = $3, response_body = $4 \
                     WHERE key_hash = $1 AND token = $2 \
                     AND state = 'completed' AND response_status IS NULL"
                ),
                claim: claim(false),
                claim_bounded: claim(true),
            },
            complete: format!(
                "UPDATE {t} SET state = 'completed', response_status = $3, response_body = $4, \
                 completed_at = {NOW}, updated_at = {NOW}, \
                 expires_at = {NOW} + $5 * interval '1 microsecond' WHERE {owned}"
            ),
            touch: format!(
                "UPDATE {t} SET expires_at = {NOW} + $3 * interval '1 microsecond', \
                 updated_at = {NOW} WHERE {owned}"
            ),
            // The lease is renewed only once half of it is spent: otherwise the indexed
            // `expires_at` and `updated_at` keep their values, and the checkpoint is a HOT update
            // (no index entries written).
            checkpoint: format!(
                "UPDATE {t} SET progress = $3, \
                 expires_at = CASE WHEN expires_at < {NOW} + $4 / 2 * interval '1 microsecond' \
                   THEN {NOW} + $4 * interval '1 microsecond' ELSE expires_at END, \
                 updated_at = CASE WHEN expires_at < {NOW} + $4 / 2 * interval '1 microsecond' \
                   THEN {NOW} ELSE updated_at END \
                 WHERE {owned}"
            ),
            resume: format!(
                "UPDATE {t} SET expires_at = created_at, attempts = 1, updated_at = {NOW} \
                 WHERE {owned}"
            ),
            expire: format!(
                "UPDATE {t} SET expires_at = created_at WHERE key_hash = $1 AND state = 'in_progress'"
            ),
            purge: format!(
                "DELETE FROM {t} WHERE key_hash IN (\
                   SELECT key_hash FROM {t} WHERE {purgeable} \
                   ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED) \
                 AND {purgeable}"
            ),
            steps: vec![
                vec![
                    format!(
                        "CREATE TABLE IF NOT EXISTS {t} (\
                       key_hash BYTEA PRIMARY KEY, \
                       namespace TEXT NOT NULL, \
                       fingerprint BYTEA NOT NULL, \
                       state TEXT NOT NULL CHECK (state IN ('in_progress', 'completed')), \
                       token BIGINT NOT NULL, \
                       attempts INTEGER NOT NULL, \
                       created_at TIMESTAMPTZ NOT NULL, \
                       updated_at TIMESTAMPTZ NOT NULL, \
                       completed_at TIMESTAMPTZ, \
                       expires_at TIMESTAMPTZ NOT NULL, \
                       response_status INTEGER, \
                       response_body BYTEA)"
                    ),
                    format!(
                        "CREATE INDEX IF NOT EXISTS \"{table}_expires_idx\" ON {t} (expires_at)"
                    ),
                    format!(
                        "CREATE INDEX IF NOT EXISTS \"{table}_reconcile_idx\" \
                     ON {t} (namespace, state, updated_at)"
                    ),
                    format!("CREATE SEQUENCE IF NOT EXISTS {seq}"),
                ],
                vec![
                    // 2: the claimer's id of an in-progress claim (`undo_claim`).
                    format!("ALTER TABLE {t} ADD COLUMN IF NOT EXISTS claim_id BYTEA"),
                ],
                // 3: the conflict mark (`mark_conflict`).
                marks.step,
                vec![
                    // 4: what wrote the record (`Record::mechanism`, `Record::key_derivation`).
                    format!("ALTER TABLE {t} ADD COLUMN IF NOT EXISTS mechanism TEXT"),
                    format!("ALTER TABLE {t} ADD COLUMN IF NOT EXISTS key_derivation SMALLINT"),
                ],
                // 5: the checkpoints of a run with steps (`Record::progress`).
                vec![format!(
                    "ALTER TABLE {t} ADD COLUMN IF NOT EXISTS progress BYTEA"
                )],
            ],
            mark_conflict: marks.mark,
            undo: format!(
                "DELETE FROM {t} WHERE key_hash = $1 AND claim_id = $2 AND state = 'in_progress'"
            ),
            release: format!("DELETE FROM {t} WHERE {owned}"),
            delete: format!("DELETE FROM {t} WHERE key_hash = $1 AND token = $2"),
            get: format!("SELECT {} FROM {t} WHERE key_hash = $1", record_columns()),
            select_records: format!("SELECT {} FROM {t} WHERE TRUE", record_columns()),
        }
    }
}

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
    tx_claim_query_for(sql, request, wait, request.lease)
}

/// [`tx_claim_query`] with `span` (µs) for $4: the lease, or the TTL of `insert_completed`.
fn tx_claim_query_for<'q, O>(
    sql: &'q str,
    request: TxClaimRequest<'q>,
    wait: &'q str,
    span: Duration,
) -> QueryAs<'q, Postgres, O, PgArguments>
where
    O: for<'r> FromRow<'r, PgRow>,
{
    sqlx::query_as(sql)
        .bind(request.key.0.as_slice())
        .bind(request.namespace)
        .bind(request.fingerprint.0.as_slice())
        .bind(micros(span))
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
        statements(table)
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

    /// A record `insert_completed` wrote gets its outcome alone (`complete_outcome`); any
    /// other, the plain completion.
    async fn complete_in_tx_on(
        store: &PostgresStore,
        conn: &mut PgConnection,
        lease: &TxLease,
        outcome: &idempotency_core::Outcome,
    ) -> Result<(), StoreError> {
        if !lease.written_complete {
            let (key, token) = (&lease.key, lease.lease.token);
            return Self::complete_on(store, conn, key, token, outcome, lease.ttl).await;
        }
        let values = Values {
            key: lease.key.0.as_slice(),
            token: token_param(lease.lease.token)?,
            status: i32::from(outcome.status),
            body: outcome.body.as_ref(),
            ..Values::default()
        };
        let sql = &store.sql.own.complete_outcome;
        owned(Self::bound_in_order(conn, sql, &[Key, Token, Status, Body], values).await?)
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
        // A caller that completes before its commit gets the record written completed.
        let completed = request.completes_before_commit;
        let (first, span) = if completed {
            (&sql.insert_completed, request.ttl)
        } else {
            (&sql.insert_fresh, request.lease)
        };
        let fresh: Result<(Option<i64>, String), sqlx::Error> =
            tx_claim_query_for(first, request, &wait, span)
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
                let mut claim = tx_claim(Claim::Acquired(lease), &request);
                if let TxClaim::Execute(lease) = &mut claim {
                    lease.written_complete = completed;
                }
                return Ok(claim);
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

    /// The one claim statement.
    async fn claim_on(
        store: &PostgresStore,
        conn: &mut PgConnection,
        request: ClaimRequest<'_>,
    ) -> Result<Claim, StoreError> {
        let row: Option<ClaimRow> = sqlx::query_as(&store.sql.own.claim)
            .bind(request.key.0.as_slice())
            .bind(request.namespace)
            .bind(request.fingerprint.0.as_slice())
            .bind(micros(request.lease))
            .bind(request.claim_id.as_bytes().as_slice())
            .bind(request.mechanism.map(Mechanism::as_str))
            .bind(request.key_derivation.map(i16::from))
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
}
