//! SQLite store on a database file in a temporary directory (and in memory): the shared
//! conformance suite unchanged, then transactional dedup, state transitions and bad input.
#![cfg(all(feature = "sqlite", feature = "testing"))]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod support;

use std::time::Duration;

use idempotency_core::StoreError;
use idempotency_sql::{SqliteStore, Transition};
use idempotency_test::unavailable;
use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use support::{Dialect, drop_tables, unique_table};

/// A fresh database file under the temporary directory, in WAL mode.
async fn pool(max: u32) -> Option<SqlitePool> {
    // One directory for every test database, easy to remove: idempotency-sql-tests.
    let dir = std::env::temp_dir().join("idempotency-sql-tests");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}.db", unique_table("idem_sqlite")));
    let options = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(60));
    match SqlitePoolOptions::new()
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(60))
        .connect_with(options)
        .await
    {
        Ok(pool) => Some(pool),
        Err(error) => unavailable("SQLite", error),
    }
}

/// The conformance suite's store: one shared table, migrated concurrently by every test.
async fn store() -> Option<SqliteStore> {
    let store = SqliteStore::new(pool(4).await?)
        .with_table_name("idem_conformance")
        .unwrap();
    store.migrate().await.unwrap();
    Some(store)
}

idempotency_test::store_conformance_tests!(store());

/// The same suite on an in-memory database (one connection: each connection of `:memory:`
/// would be its own database).
mod in_memory {
    use super::*;

    async fn store() -> Option<SqliteStore> {
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect("sqlite::memory:")
            .await
            .ok()?;
        let store = SqliteStore::new(pool);
        store.migrate().await.unwrap();
        Some(store)
    }

    idempotency_test::store_conformance_tests!(store());
}

/// A store on a fresh table plus a fresh coupons table.
async fn fresh(max: u32) -> Option<(SqliteStore, SqlitePool, String)> {
    let pool = pool(max).await?;
    let store = SqliteStore::new(pool.clone())
        .with_table_name(&unique_table("idem"))
        .unwrap();
    store.migrate().await.unwrap();
    let coupons = unique_table("coupons");
    sqlx::query(&format!(
        "CREATE TABLE {coupons} (id INTEGER PRIMARY KEY, trade_no TEXT NOT NULL)"
    ))
    .execute(&pool)
    .await
    .unwrap();
    Some((store, pool, coupons))
}

support::store_scenario_tests!(SqliteStore);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn table_names_that_are_not_identifiers_are_refused() {
    if let Some(pool) = pool(1).await {
        for bad in ["x; DROP TABLE y", "a\"b", "", "1t", "public.t", "t t"] {
            assert!(
                matches!(
                    SqliteStore::new(pool.clone()).with_table_name(bad),
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

/// SQLite: `?` placeholders, `INTEGER PRIMARY KEY` rowid keys, `INTEGER` state codes.
impl Dialect for sqlx::Sqlite {
    const SERIAL_KEY: &'static str = "INTEGER PRIMARY KEY";
    const PLACEHOLDER: &'static str = "?";
    const CODE_COLUMN: &'static str = "INTEGER";
}

support::transition_tests!(pool);

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

// The audit table in the store's database: an action and its audit row commit together, so a
// failing audit write leaves the action un-applied.
on_a_fresh_table!(audit_is_atomic_with_the_action, support::drop_tables);
on_a_fresh_table!(purges_keep_the_table_ttl, support::drop_tables);
