//! `idempotency conflicts` and `inspect` against the real stores, Redis (`REDIS_URL`) and
//! PostgreSQL (`DATABASE_URL`): a record that met conflicting duplicates is listed with its
//! count and the last one's time, records without are not, and `inspect` prints both.
#![cfg(all(feature = "postgres", feature = "redis"))]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idempotency_core::{Outcome, Scope, Store};
use idempotency_operations::Operations;
use idempotency_redis::RedisStore;
use idempotency_sql::PostgresStore;
use idempotency_test::{completed, unavailable, unique_namespace};
use support::expect;

fn unix_ms(at: SystemTime) -> u64 {
    u64::try_from(at.duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

async fn lists_conflicted_records<S: Store + Operations>(store: &S, store_args: &[&str]) {
    let namespace = unique_namespace("payments.callback");
    let scope = Scope::new(namespace.clone());
    let long = Duration::from_secs(600);
    let marked = completed(store, &scope, "T1", &Outcome::new(200, "success"), long).await;
    completed(store, &scope, "T2", &Outcome::new(200, "success"), long).await;
    let before = unix_ms(SystemTime::now()) - 5_000;
    assert!(store.mark_conflict(&marked).await.unwrap());
    assert!(store.mark_conflict(&marked).await.unwrap());

    let run = |args: &[&str]| {
        let mut all: Vec<&str> = args.to_vec();
        all.extend_from_slice(store_args);
        all.extend_from_slice(&["--namespace", &namespace]);
        expect(0, &all)
    };
    let listed = run(&["conflicts", "--json"]).lines();
    assert_eq!(listed.len(), 1, "only the marked record: {listed:?}");
    assert_eq!(listed[0]["key_hash"], marked.to_hex());
    assert_eq!(listed[0]["conflicts"], 2);
    assert!(listed[0]["last_conflict_at_ms"].as_u64().unwrap() >= before);
    let recent = run(&["conflicts", "--since", "1h", "--json"]).lines();
    assert_eq!(recent.len(), 1);

    let table = run(&["conflicts"]).stdout;
    assert!(table.contains("CONFLICTS"), "{table}");
    let row = table
        .lines()
        .find(|line| line.starts_with(&marked.to_hex()))
        .unwrap_or_else(|| panic!("no row for the record in:\n{table}"));
    assert!(row.contains(" 2 ") && row.contains(" ago"), "{row}");
    assert!(table.contains("1 record(s) with conflicts"), "{table}");

    let shown = run(&["inspect", "--key", "T1", "--json"]).lines();
    assert_eq!(shown[0]["conflicts"], 2, "{shown:?}");
    assert!(shown[0]["last_conflict_at_ms"].is_u64(), "{shown:?}");
    let unmarked = run(&["inspect", "--key", "T2", "--json"]).lines();
    assert_eq!(unmarked[0]["conflicts"], 0, "{unmarked:?}");
    assert!(unmarked[0].get("last_conflict_at_ms").is_none());
}

#[tokio::test]
async fn conflicts_are_listed_on_redis() {
    let url = support::redis_url();
    let prefix = format!("{}:", unique_namespace("test:cli:conflicts"));
    let store = match RedisStore::connect(&url).await {
        Ok(store) => store.with_key_prefix(prefix.clone()),
        Err(error) => return unavailable::<()>("Redis", error).unwrap_or_default(),
    };
    lists_conflicted_records(&store, &["--store", &url, "--prefix", &prefix]).await;
}

#[tokio::test]
async fn conflicts_are_listed_on_postgres() {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let pool = match sqlx::PgPool::connect(&url).await {
        Ok(pool) => pool,
        Err(error) => return unavailable::<()>("PostgreSQL", error).unwrap_or_default(),
    };
    let table = unique_namespace("idem_cli_conflicts").replace('.', "_");
    let store = PostgresStore::new(pool.clone())
        .with_table_name(&table)
        .unwrap();
    store.migrate().await.unwrap();
    lists_conflicted_records(&store, &["--store", &url, "--table", &table]).await;
    for drop in [
        format!("DROP TABLE \"{table}\""),
        format!("DROP SEQUENCE \"{table}_token_seq\""),
        format!("DELETE FROM idempotency_schema WHERE table_name = '{table}'"),
    ] {
        sqlx::query(&drop).execute(&pool).await.unwrap();
    }
}
