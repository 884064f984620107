//! Versioned migrations, and the shared scenarios as `#[tokio::test]`s.

use super::*;
use idempotency_core::CompleteRequest;

/// The transactional, purge and sweeper scenarios above as `#[tokio::test]`s, for a test file
/// with `fresh(max_connections) -> Option<(store, pool, coupons table)>` and
/// `drop_tables(&pool, &[table])`, which runs once a scenario passed. `$store` is the store type.
/// Versioned migrations: a table is at the latest schema version once migrated, and a table
/// created by 0.1 (the same schema, no version row) is upgraded in place, its records kept;
/// migrating an up-to-date table changes nothing (no DDL, the version row untouched); a table
/// newer than this release is refused.
/// The schema version this release writes.
const LATEST_VERSION: i64 = SCHEMA_VERSION as i64;

pub async fn migrations_are_versioned<S, M>(
    store: S,
    pool: Pool<S::Database>,
    table: String,
    migrate: M,
) where
    S: TxStore,
    S::Database: Dialect,
    M: AsyncFn(&S) -> Result<(), StoreError>,
{
    let version = format!("SELECT version FROM {SCHEMA_TABLE} WHERE table_name = '{table}'");
    assert_eq!(S::Database::scalar(&pool, &version).await, LATEST_VERSION);

    // A record written before the upgrade.
    let key = unique_key();
    let fp = Fingerprint::of_bytes(b"kept");
    let Claim::Acquired(lease) = store
        .claim(ClaimRequest {
            key: &key,
            namespace: "migrations",
            fingerprint: &fp,
            lease: Duration::from_secs(30),
            claim_id: idempotency_core::ClaimId::random(),
            mechanism: None,
            key_derivation: None,
        })
        .await
        .unwrap()
    else {
        panic!("a fresh key is claimed");
    };
    let outcome = Outcome::new(200, "before the upgrade");
    store
        .complete(CompleteRequest {
            key: &key,
            token: lease.token,
            outcome: &outcome,
            ttl: Duration::from_secs(3600),
        })
        .await
        .unwrap();

    // As 0.1 left it: the table without the claim id, the conflict mark nor what wrote each
    // record, no version row.
    let forget_version = format!("DELETE FROM {SCHEMA_TABLE} WHERE table_name = '{table}'");
    for column in [
        "claim_id",
        "conflicts",
        "last_conflict_at",
        "mechanism",
        "key_derivation",
    ] {
        S::Database::run(&pool, &format!("ALTER TABLE {table} DROP COLUMN {column}")).await;
    }
    S::Database::run(&pool, &forget_version).await;
    migrate(&store).await.unwrap();
    assert_eq!(S::Database::scalar(&pool, &version).await, LATEST_VERSION);
    // A migration that stopped after its DDL (MySQL commits each at once), before it recorded
    // the version: run again, it completes.
    S::Database::run(&pool, &forget_version).await;
    migrate(&store).await.unwrap();
    assert_eq!(S::Database::scalar(&pool, &version).await, LATEST_VERSION);
    let record = store.get(&key).await.unwrap().expect("the record survives");
    assert_eq!(record.outcome, Some(outcome));
    assert_eq!((record.conflicts, record.last_conflict_at), (0, None));
    assert!(
        store.mark_conflict(&key).await.unwrap(),
        "the upgraded table keeps marks"
    );
    assert_eq!(store.get(&key).await.unwrap().map(|r| r.conflicts), Some(1));
    // Rows written before records said what wrote them read as unknown.
    assert_eq!((record.mechanism, record.key_derivation), (None, None));
    // Rows written after it say so.
    let said = unique_key();
    store
        .claim(ClaimRequest {
            key: &said,
            namespace: "migrations",
            fingerprint: &fp,
            lease: Duration::from_secs(30),
            claim_id: idempotency_core::ClaimId::random(),
            mechanism: Some(idempotency_core::Mechanism::Message),
            key_derivation: Some(2),
        })
        .await
        .unwrap();
    let record = store.get(&said).await.unwrap().expect("claimed");
    assert_eq!(
        (record.mechanism, record.key_derivation),
        (Some(idempotency_core::Mechanism::Message), Some(2))
    );

    // Up to date: the version row is not written again (its stamp stays as set here).
    let marked = "migrated_at = '2001-01-01 00:00:00'";
    S::Database::run(
        &pool,
        &format!("UPDATE {SCHEMA_TABLE} SET {marked} WHERE table_name = '{table}'"),
    )
    .await;
    migrate(&store).await.unwrap();
    let untouched =
        format!("SELECT COUNT(*) FROM {SCHEMA_TABLE} WHERE table_name = '{table}' AND {marked}");
    assert_eq!(
        S::Database::scalar(&pool, &untouched).await,
        1,
        "an up-to-date table is left as it is"
    );

    // A table from a newer release is refused, not downgraded.
    S::Database::run(
        &pool,
        &format!("UPDATE {SCHEMA_TABLE} SET version = 99 WHERE table_name = '{table}'"),
    )
    .await;
    assert!(matches!(migrate(&store).await, Err(StoreError::Config(_))));
    S::Database::run(
        &pool,
        &format!("DELETE FROM {SCHEMA_TABLE} WHERE table_name = '{table}'"),
    )
    .await;
}

macro_rules! store_scenario_tests {
    ($store:ty) => {
        $crate::support::store_scenario_tests!(@test tx_storm_200_duplicates_one_coupon, 20,
            |store, pool, coupons| $crate::support::tx_storm(store, pool, coupons));
        $crate::support::store_scenario_tests!(@test tx_rollback_leaves_no_trace, 4,
            |store, pool, coupons| $crate::support::tx_rollback_leaves_no_trace(store, pool, coupons));
        $crate::support::store_scenario_tests!(@test tx_waiting_duplicate_replays_or_executes, 4,
            |store, pool, coupons| $crate::support::tx_waiting_duplicate(store, pool, coupons));
        $crate::support::store_scenario_tests!(@test tx_owner_rollback_under_storm, 20,
            |store, pool, coupons| $crate::support::tx_owner_rollback_under_storm(store, pool, coupons));
        $crate::support::store_scenario_tests!(@test tx_walk_follows_the_iron_rule, 2,
            |store, pool, coupons| $crate::support::tx_walk(store, pool, coupons));
        $crate::support::store_scenario_tests!(@test tx_record_written_last, 22,
            |store, pool, coupons| $crate::support::tx_record_written_last(store, pool, coupons));
        $crate::support::store_scenario_tests!(@test tx_sees_engine_claims, 4,
            |store, pool, _coupons| $crate::support::tx_sees_engine_claims(store, pool));
        $crate::support::store_scenario_tests!(@test tx_upgrade, 20,
            |store, pool, coupons| $crate::support::tx_upgrade(
                store.clone(),
                store.with_previous_keys(true),
                pool,
                coupons,
            ));
        $crate::support::store_scenario_tests!(@test purge_batches_and_list, 4,
            |store, _pool, _coupons| $crate::support::purge_batches_and_list(
                store,
                async |s: &$store, filter| s.list(&filter).await.unwrap(),
            ));
        $crate::support::store_scenario_tests!(@test migrations_are_versioned, 2,
            |store, pool, _coupons| $crate::support::migrations_are_versioned(
                store.clone(),
                pool,
                store.table_name().to_owned(),
                async |s: &$store| s.migrate().await,
            ));
        $crate::support::store_scenario_tests!(@test sweeper_purges_expired_records, 2,
            |store, _pool, _coupons| $crate::support::sweeper_purges(
                store.with_abandoned_grace(std::time::Duration::from_millis(200)),
            ));
    };
    (@test $name:ident, $connections:expr, |$store:ident, $pool:ident, $coupons:ident| $scenario:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $name() {
            if let Some(($store, $pool, $coupons)) = fresh($connections).await {
                let tables = [$store.table_name().to_owned(), $coupons.clone()];
                let cleanup = $pool.clone();
                $scenario.await;
                drop_tables(&cleanup, &tables).await;
                $crate::support::forget_version(&cleanup, &tables[0]).await;
            }
        }
    };
}
pub(crate) use store_scenario_tests;
