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

/// A claim its caller completes before the commit (`claim_key_to_complete_in_tx`, the queue's
/// record of truth) is committed as any completed record: state, outcome, expiry after the
/// TTL, a replay for the next claim; its completion writes the outcome alone, a HOT update
/// (no index entry written again), which the plain completion of an in-progress claim is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_completed_before_its_commit_is_completed_by_a_hot_update() {
    use idempotency_core::{Mechanism, Outcome, RecordState, Scope};
    use idempotency_sql::TxClaim;

    // One connection: the statistics read are the ones its own updates flushed.
    let Some((store, pool, coupons)) = fresh(1).await else {
        return;
    };
    let table = store.table_name().to_owned();
    let scope = Scope::new("truth");
    let fingerprint = Fingerprint::of_bytes(b"paid");
    let ttl = Duration::from_secs(7 * 24 * 3600);
    let hot_updates = || async {
        sqlx::query("SELECT pg_stat_force_next_flush()")
            .execute(&pool)
            .await
            .unwrap();
        let (hot, all): (i64, i64) = sqlx::query_as(
            "SELECT n_tup_hot_upd, n_tup_upd FROM pg_stat_user_tables WHERE relname = $1",
        )
        .bind(&table)
        .fetch_one(&pool)
        .await
        .unwrap();
        (hot, all)
    };
    let run = |key: &'static str, before_commit: bool| {
        let (store, scope) = (store.clone(), scope.clone());
        async move {
            let mut tx = store.begin().await.unwrap();
            let claim = if before_commit {
                store
                    .claim_key_to_complete_in_tx(
                        &mut tx,
                        &scope,
                        Mechanism::Message,
                        key,
                        &fingerprint,
                        Some(ttl),
                    )
                    .await
            } else {
                store
                    .claim_key_in_tx(
                        &mut tx,
                        &scope,
                        Mechanism::Message,
                        key,
                        &fingerprint,
                        Some(ttl),
                    )
                    .await
            };
            let TxClaim::Execute(lease) = claim.unwrap() else {
                panic!("a fresh key is executed");
            };
            let outcome = Outcome::new(0, format!("coupon for {key}"));
            store
                .complete_in_tx(&mut tx, lease, &outcome)
                .await
                .unwrap();
            tx.commit().await.unwrap();
            outcome
        }
    };

    let before = hot_updates().await;
    let plain = run("T1", false).await;
    let after_plain = hot_updates().await;
    assert_eq!(after_plain.1 - before.1, 1, "one completion");
    assert_eq!(
        after_plain.0 - before.0,
        0,
        "the plain completion changes indexed columns"
    );

    let outcome = run("T2", true).await;
    let after = hot_updates().await;
    assert_eq!(after.1 - after_plain.1, 1, "one completion");
    assert_eq!(
        after.0 - after_plain.0,
        1,
        "the outcome alone: a HOT update"
    );

    // Committed as the plain path commits: completed, its outcome, its expiry a TTL away; the
    // next claim replays.
    for (key, expected) in [("T1", &plain), ("T2", &outcome)] {
        let storage = scope.storage_key_for(Mechanism::Message, key);
        let record = store.get(&storage).await.unwrap().expect("committed");
        assert_eq!(record.state, RecordState::Completed);
        assert_eq!(record.outcome.as_ref(), Some(expected));
        let completed_at = record.completed_at.unwrap();
        let kept = record.expires_at.duration_since(completed_at).unwrap();
        assert!(
            kept > ttl - Duration::from_millis(100) && kept <= ttl,
            "{kept:?}"
        );
        let mut tx = store.begin().await.unwrap();
        let again = store
            .claim_key_to_complete_in_tx(
                &mut tx,
                &scope,
                Mechanism::Message,
                key,
                &fingerprint,
                Some(ttl),
            )
            .await
            .unwrap();
        assert!(
            matches!(again, TxClaim::Replay(ref replayed) if replayed == expected),
            "{again:?}"
        );
        tx.rollback().await.unwrap();
    }
    drop_tables(&pool, &[table, coupons]).await;
}
