//! PostgreSQL store against the real server (DATABASE_URL, default
//! postgres://postgres@127.0.0.1:5432/test): the shared conformance suite unchanged, then
//! transactional dedup, state transitions, faults and bad input.
#![cfg(all(feature = "postgres", feature = "testing"))]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod support;

use std::time::Duration;

use idempotency_core::{Claim, ClaimRequest, Fingerprint, Store, StoreError};
use idempotency_sql::{PostgresStore, Transition, TransitionOutcome, TxStore};
use idempotency_test::{unavailable, unique_key};
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use support::{Dialect, unique_table};

fn url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

async fn pool(max: u32) -> Option<PgPool> {
    match PgPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(30))
        .connect(&url())
        .await
    {
        Ok(pool) => Some(pool),
        Err(error) => unavailable("PostgreSQL", error),
    }
}

/// The conformance suite's store: one shared table, migrated concurrently by every test.
async fn store() -> Option<PostgresStore> {
    let store = PostgresStore::new(pool(8).await?)
        .with_table_name("idem_conformance")
        .unwrap();
    store.migrate().await.unwrap();
    Some(store)
}

idempotency_test::store_conformance_tests!(store());

/// Drops a test's tables (and a store table's token sequence) once it passed.
async fn drop_tables(pool: &PgPool, tables: &[String]) {
    for table in tables {
        sqlx::raw_sql(&format!(
            "DROP TABLE IF EXISTS {table}; DROP SEQUENCE IF EXISTS {table}_token_seq"
        ))
        .execute(pool)
        .await
        .unwrap();
    }
}

/// A store on a fresh table plus a fresh coupons table.
async fn fresh(max: u32) -> Option<(PostgresStore, PgPool, String)> {
    let pool = pool(max).await?;
    let store = PostgresStore::new(pool.clone())
        .with_table_name(&unique_table("idem"))
        .unwrap();
    store.migrate().await.unwrap();
    let coupons = unique_table("coupons");
    sqlx::query(&format!(
        "CREATE TABLE {coupons} (id BIGSERIAL PRIMARY KEY, trade_no TEXT NOT NULL)"
    ))
    .execute(&pool)
    .await
    .unwrap();
    Some((store, pool, coupons))
}

support::store_scenario_tests!(PostgresStore);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn table_names_that_are_not_identifiers_are_refused() {
    if let Some(pool) = pool(1).await {
        for bad in ["x; DROP TABLE y", "a\"b", "", "1t", "public.t", "t t"] {
            assert!(
                matches!(
                    PostgresStore::new(pool.clone()).with_table_name(bad),
                    Err(StoreError::Config(_))
                ),
                "{bad:?} must be refused"
            );
        }
        assert!(matches!(
            Transition::new("orders", "id; --", "status"),
            Err(StoreError::Config(_))
        ));
    }
}

/// `migrate` on a connection that already ran the application's own quiet set-up (the same
/// `SET LOCAL client_min_messages = warning`, without arguments, cached as a prepared
/// statement) works: the store binds no argument to a statement that takes none. The coupon
/// consumer example met this, migrating its business table first.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn migrate_after_the_application_prepared_the_same_set_up_statement() {
    let Some(pool) = pool(1).await else {
        return;
    };
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("SET LOCAL client_min_messages = warning")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let table = unique_table("idem_quiet");
    let store = PostgresStore::new(pool.clone())
        .with_table_name(&table)
        .unwrap();
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();
    drop_tables(&pool, &[table]).await;
}

/// Version 7 drops the `CHECK` on `state` that version 1 created (PostgreSQL plans it again in
/// every write): a table at version 6 loses it when migrated, and nothing else changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn version_7_drops_the_state_check() {
    let Some(pool) = pool(2).await else {
        return;
    };
    let table = unique_table("idem_state_check");
    let store = PostgresStore::new(pool.clone())
        .with_table_name(&table)
        .unwrap();
    store.migrate().await.unwrap();
    let checks = format!(
        "SELECT count(*) FROM pg_constraint WHERE conrelid = '{table}'::regclass AND contype = 'c'"
    );
    let count = async || -> i64 { sqlx::query_scalar(&checks).fetch_one(&pool).await.unwrap() };
    assert_eq!(count().await, 0, "a new table has no CHECK");

    // As version 6 left it: the CHECK of version 1 in place.
    sqlx::raw_sql(&format!(
        "ALTER TABLE {table} ADD CHECK (state IN ('in_progress', 'completed')); \
         UPDATE idempotency_schema SET version = 6 WHERE table_name = '{table}'"
    ))
    .execute(&pool)
    .await
    .unwrap();
    assert_eq!(count().await, 1);
    store.migrate().await.unwrap();
    assert_eq!(count().await, 0, "migrated to 7, the CHECK is gone");
    let version: i64 = sqlx::query_scalar(&format!(
        "SELECT version FROM idempotency_schema WHERE table_name = '{table}'"
    ))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(version, 7);
    drop_tables(&pool, &[table]).await;
}

/// The first migrations of a database, of several tables at once, all succeed: they share the
/// versions table, which only one of them may create (in a database of its own, so that the
/// versions table is missing).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn first_migrations_of_several_tables_at_once_all_succeed() {
    let Some(admin) = pool(1).await else {
        return;
    };
    let database = unique_table("idem_first_migration");
    sqlx::query(&format!("CREATE DATABASE {database}"))
        .execute(&admin)
        .await
        .unwrap();
    let mut options: PgConnectOptions = url().parse().unwrap();
    options = options.database(&database);
    let fresh = PgPoolOptions::new()
        .max_connections(8)
        .connect_with(options)
        .await
        .unwrap();
    let migrations = (0..8).map(|n| {
        let store = PostgresStore::new(fresh.clone())
            .with_table_name(&format!("records_{n}"))
            .unwrap();
        tokio::spawn(async move { store.migrate().await })
    });
    for migration in migrations.collect::<Vec<_>>() {
        migration.await.unwrap().unwrap();
    }
    fresh.close().await;
    sqlx::query(&format!("DROP DATABASE {database} WITH (FORCE)"))
        .execute(&admin)
        .await
        .unwrap();
}

/// PostgreSQL: `$1` placeholders, `BIGSERIAL` keys, `SMALLINT` state codes.
impl Dialect for sqlx::Postgres {
    const SERIAL_KEY: &'static str = "BIGSERIAL PRIMARY KEY";
    const PLACEHOLDER: &'static str = "$1";
    const CODE_COLUMN: &'static str = "SMALLINT";

    /// PostgreSQL also takes the pool itself as the executor.
    fn apply_outside_tx<'a>(
        pool: &'a PgPool,
        transition: &'a Transition,
        id: i64,
    ) -> impl Future<Output = Result<TransitionOutcome, StoreError>> + Send + 'a {
        transition.apply_postgres(pool, id)
    }
}

support::transition_tests!(pool);

/// The server kills the store's connections mid-run: calls fail with `Unavailable` (a 503),
/// nothing panics, and the same store works again without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn terminated_connections_are_unavailable_then_recover() {
    let Some(admin) = pool(2).await else { return };
    let app = format!("idem_fault_{}", &unique_key().to_hex()[..8]);
    let options: PgConnectOptions = url()
        .parse::<PgConnectOptions>()
        .unwrap()
        .application_name(&app);
    // No ping before handing out a connection: a dead one surfaces as an error.
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .test_before_acquire(false)
        .connect_with(options)
        .await
        .unwrap();
    let store = PostgresStore::new(pool.clone())
        .with_table_name(&unique_table("idem"))
        .unwrap();
    store.migrate().await.unwrap();
    let fp = Fingerprint::of_bytes(b"x");
    let claim = async |store: &PostgresStore| {
        let key = unique_key();
        store
            .claim(ClaimRequest {
                key: &key,
                namespace: "fault",
                fingerprint: &fp,
                lease: Duration::from_secs(30),
                claim_id: idempotency_core::ClaimId::random(),
                mechanism: None,
                key_derivation: None,
            })
            .await
    };
    assert!(matches!(claim(&store).await, Ok(Claim::Acquired(_))));

    // A transaction open while its backend is terminated.
    let mut tx = pool.begin().await.unwrap();
    let terminate = "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity \
                     WHERE application_name = $1";
    let killed: (i64,) = sqlx::query_as(terminate)
        .bind(&app)
        .fetch_one(&admin)
        .await
        .unwrap();
    assert!(killed.0 >= 1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let key = unique_key();
    let request = store.tx_request("fault", &key, &fp);
    let in_tx = store.claim_storage_key_in_tx(&mut tx, request).await;
    assert!(
        matches!(in_tx, Err(StoreError::Unavailable(_))),
        "a dead connection is Unavailable, got {in_tx:?}"
    );
    drop(tx);

    // The pool heals: errors are Unavailable (never a panic) until a fresh connection answers.
    let mut recovered = false;
    for _ in 0..10 {
        match claim(&store).await {
            Ok(Claim::Acquired(_)) => {
                recovered = true;
                break;
            }
            Err(StoreError::Unavailable(_)) => continue,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(recovered, "the store recovers without a restart");

    // A server that cannot be reached at all is Unavailable too.
    let nowhere = PgPoolOptions::new()
        .acquire_timeout(Duration::from_millis(500))
        .connect_lazy("postgres://postgres@127.0.0.1:1/test")
        .unwrap();
    let down = PostgresStore::new(nowhere);
    assert!(matches!(
        claim(&down).await,
        Err(StoreError::Unavailable(_))
    ));
    assert!(matches!(
        down.migrate().await,
        Err(StoreError::Unavailable(_))
    ));
}

/// Every operation (list, count, fenced and audited release, complete, delete, reconcile,
/// purge with JSON lines and with an archive table, the audit table) on a fresh table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_on_a_fresh_table() {
    let Some((store, pool, coupons)) = fresh(4).await else {
        return;
    };
    let mut tables = support::operations::operations_on(store.clone(), pool.clone()).await;
    tables.extend([store.table_name().to_owned(), coupons]);
    drop_tables(&pool, &tables).await;
}

/// A purge beside live claims deletes every expired record and no live one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn purge_beside_live_traffic() {
    let Some((store, pool, coupons)) = fresh(6).await else {
        return;
    };
    support::operations::purge_beside_traffic(store.clone(), 1_000, 300).await;
    let tables = [store.table_name().to_owned(), coupons];
    drop_tables(&pool, &tables).await;
}

/// Purges, counts and listings judge expiry by the database's clock: a second pool on the same
/// table whose `statement_timestamp()` runs 3 h ahead (a function of that name in a schema
/// searched before `pg_catalog`) purges and counts what the host's clock calls live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_judge_expiry_by_the_database_clock() {
    let Some((store, pool, coupons)) = fresh(4).await else {
        return;
    };
    let schema = unique_table("clock_ahead");
    sqlx::raw_sql(&format!(
        "CREATE SCHEMA {schema}; CREATE FUNCTION {schema}.statement_timestamp() RETURNS \
         timestamptz LANGUAGE sql STABLE AS \
         'SELECT pg_catalog.statement_timestamp() + interval ''3 hours'''"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let search_path = format!("SET search_path = {schema}, public, pg_catalog");
    let ahead = support::pool_with_setup(&url(), &search_path).await;
    let skewed = PostgresStore::new(ahead)
        .with_table_name(store.table_name())
        .unwrap();
    support::operations::judged_by_the_database_clock(store.clone(), skewed).await;
    let tables = [store.table_name().to_owned(), coupons];
    drop_tables(&pool, &tables).await;
    sqlx::raw_sql(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&pool)
        .await
        .unwrap();
}

// The audit table in the store's database: an action and its audit row commit together, so a
// failing audit write leaves the action un-applied.
on_a_fresh_table!(audit_is_atomic_with_the_action, drop_tables);
on_a_fresh_table!(purges_keep_the_table_ttl, drop_tables);
