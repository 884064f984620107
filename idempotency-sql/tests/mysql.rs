//! MySQL/MariaDB store against the real server (MYSQL_URL, default
//! mysql://root@127.0.0.1:3306/test): the shared conformance suite unchanged, then
//! transactional dedup, state transitions, faults and bad input.
#![cfg(all(feature = "mysql", feature = "testing"))]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod support;

use std::time::Duration;

use idempotency_core::{Claim, ClaimRequest, Fingerprint, Store, StoreError};
use idempotency_sql::{MySqlStore, Transition, TxStore};
use idempotency_test::{unavailable, unique_key};
use sqlx::MySqlPool;
use sqlx::mysql::MySqlPoolOptions;
use support::{Dialect, drop_tables, unique_table};

fn url() -> String {
    std::env::var("MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned())
}

async fn pool(max: u32) -> Option<MySqlPool> {
    match MySqlPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(30))
        .connect(&url())
        .await
    {
        Ok(pool) => Some(pool),
        Err(error) => unavailable("MySQL", error),
    }
}

/// The conformance suite's store: one shared table, migrated concurrently by every test.
async fn store() -> Option<MySqlStore> {
    let store = MySqlStore::new(pool(8).await?)
        .with_table_name("idem_conformance")
        .unwrap();
    store.migrate().await.unwrap();
    Some(store)
}

idempotency_test::store_conformance_tests!(store());

/// A store on a fresh table plus a fresh coupons table.
async fn fresh(max: u32) -> Option<(MySqlStore, MySqlPool, String)> {
    let pool = pool(max).await?;
    let store = MySqlStore::new(pool.clone())
        .with_table_name(&unique_table("idem"))
        .unwrap();
    store.migrate().await.unwrap();
    let coupons = unique_table("coupons");
    sqlx::query(&format!(
        "CREATE TABLE {coupons} (id BIGINT AUTO_INCREMENT PRIMARY KEY, trade_no VARCHAR(64) NOT NULL)"
    ))
    .execute(&pool)
    .await
    .unwrap();
    Some((store, pool, coupons))
}

support::store_scenario_tests!(MySqlStore);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn table_names_that_are_not_identifiers_are_refused() {
    if let Some(pool) = pool(1).await {
        for bad in ["x; DROP TABLE y", "a`b", "", "1t", "public.t", "t t"] {
            assert!(
                matches!(
                    MySqlStore::new(pool.clone()).with_table_name(bad),
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

/// MySQL/MariaDB: `?` placeholders, `AUTO_INCREMENT` keys, `TINYINT` state codes.
impl Dialect for sqlx::MySql {
    const SERIAL_KEY: &'static str = "BIGINT AUTO_INCREMENT PRIMARY KEY";
    const PLACEHOLDER: &'static str = "?";
    const CODE_COLUMN: &'static str = "TINYINT";
}

support::transition_tests!(pool);

/// The server kills the store's connections mid-run: calls fail with `Unavailable` (a 503),
/// nothing panics, and the same store works again without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_connections_are_unavailable_then_recover() {
    let Some(admin) = pool(2).await else { return };
    let pool = MySqlPoolOptions::new()
        .max_connections(2)
        .test_before_acquire(false)
        .connect(&url())
        .await
        .unwrap();
    let store = MySqlStore::new(pool.clone())
        .with_table_name(&unique_table("idem"))
        .unwrap();
    store.migrate().await.unwrap();
    let fp = Fingerprint::of_bytes(b"x");
    let claim = async |store: &MySqlStore| {
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

    let mut tx = pool.begin().await.unwrap();
    let (id,): (u64,) = sqlx::query_as("SELECT CONNECTION_ID()")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    sqlx::query(&format!("KILL {id}"))
        .execute(&admin)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let key = unique_key();
    let request = store.tx_request("fault", &key, &fp);
    let in_tx = store.claim_storage_key_in_tx(&mut tx, request).await;
    assert!(
        matches!(in_tx, Err(StoreError::Unavailable(_))),
        "a dead connection is Unavailable, got {in_tx:?}"
    );
    drop(tx);

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

    let nowhere = MySqlPoolOptions::new()
        .acquire_timeout(Duration::from_millis(500))
        .connect_lazy("mysql://root@127.0.0.1:1/test")
        .unwrap();
    let down = MySqlStore::new(nowhere);
    assert!(matches!(
        claim(&down).await,
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
    support::drop_tables(&pool, &tables).await;
}

/// A purge beside live claims deletes every expired record and no live one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn purge_beside_live_traffic() {
    let Some((store, pool, coupons)) = fresh(6).await else {
        return;
    };
    support::operations::purge_beside_traffic(store.clone(), 1_000, 300).await;
    let tables = [store.table_name().to_owned(), coupons];
    support::drop_tables(&pool, &tables).await;
}

/// Purges, counts and listings judge expiry by the database's clock: a second pool on the same
/// table whose sessions run 3 h ahead (`SET timestamp`, which `UTC_TIMESTAMP(6)` follows)
/// purges and counts what the host's clock calls live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_judge_expiry_by_the_database_clock() {
    let Some((store, pool, coupons)) = fresh(4).await else {
        return;
    };
    let setup = "SET timestamp = UNIX_TIMESTAMP() + 10800";
    let ahead = support::pool_with_setup(&url(), setup).await;
    let skewed = MySqlStore::new(ahead)
        .with_table_name(store.table_name())
        .unwrap();
    support::operations::judged_by_the_database_clock(store.clone(), skewed).await;
    let tables = [store.table_name().to_owned(), coupons];
    support::drop_tables(&pool, &tables).await;
}

// The audit table in the store's database: an action and its audit row commit together, so a
// failing audit write leaves the action un-applied.
on_a_fresh_table!(audit_is_atomic_with_the_action, support::drop_tables);
on_a_fresh_table!(purges_keep_the_table_ttl, support::drop_tables);
