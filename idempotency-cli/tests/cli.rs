//! The `idempotency` binary, run as an operator runs it, against the real stores: Redis
//! (`REDIS_URL`, default `redis://127.0.0.1:6379`), a Redis Cluster (`REDIS_CLUSTER_URLS`,
//! default the three loopback ports of `.ci/redis-cluster.sh`), PostgreSQL (`DATABASE_URL`),
//! MariaDB/MySQL (`MYSQL_URL`) and SQLite (a file under the temporary directory). A server that
//! does not answer skips its test (printed), or fails it under `CI=true`.
#![cfg(all(
    feature = "postgres",
    feature = "mysql",
    feature = "sqlite",
    feature = "redis"
))]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod support;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use idempotency_core::{Mechanism, Outcome, RecordState, Scope, Store};
use idempotency_operations::Operations;
use idempotency_redis::RedisStore;
use idempotency_sql::{MySqlStore, PostgresStore, SqlStore, SqliteStore};
use idempotency_test::{claimed, completed, unavailable, unique_namespace};
use support::{expect, idempotency_with_env, redis_url};

/// Every subcommand on `store`, which `store_args` (`--store URL` and `--table`/`--prefix`)
/// name to the binary. `expires_natively`: Redis deletes expired records itself.
async fn drill<S: Store + Operations>(store: &S, store_args: &[&str], expires_natively: bool) {
    let namespace = unique_namespace("payments.callback");
    let scope = Scope::new(namespace.clone());
    let hex = |raw: &str| scope.storage_key_for(Mechanism::Request, raw).to_hex();
    // Outlives the drill however slow the machine (a Redis full of other keys makes each scan
    // slow): T2, T4 and T6 must not expire or end their leases meanwhile.
    let long = Duration::from_secs(3600);
    // T5 expires before T1's lease ends: once T1 is abandoned, T5 is purgeable.
    let old = completed(
        store,
        &scope,
        "T5",
        &Outcome::new(200, "old"),
        Duration::from_millis(1),
    )
    .await;
    let crashed = claimed(store, &scope, "T1", Duration::from_millis(100)).await;
    completed(store, &scope, "T2", &Outcome::new(200, "paid"), long).await;
    let by_hand = claimed(store, &scope, "T4", long).await;
    let running = claimed(store, &scope, "T6", long).await;

    let with = |args: &[&str]| -> Vec<String> {
        let mut all: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        all.extend(store_args.iter().map(|a| (*a).to_owned()));
        all.extend(["--namespace".to_owned(), namespace.clone()]);
        all
    };
    let run = |code: i32, args: &[&str]| {
        let args = with(args);
        expect(code, &args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    // Waits for the event: the store itself reports T1's lease ended.
    while run(0, &["stuck", "--json"]).lines().is_empty() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // stuck --older-than 0s: every in-progress record, one JSON object each.
    let stuck = run(0, &["stuck", "--older-than", "0s", "--json"]).lines();
    let found: BTreeSet<String> = stuck
        .iter()
        .map(|l| l["key_hash"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(found, BTreeSet::from([hex("T1"), hex("T4"), hex("T6")]));
    for line in &stuck {
        assert_eq!(line["namespace"], namespace.as_str());
        assert_eq!(line["attempts"], 1);
        assert!(line["age_ms"].as_u64().is_some(), "{line}");
        let expected = if line["key_hash"] == hex("T1").as_str() {
            "abandoned"
        } else {
            "in_progress"
        };
        assert_eq!(line["state"], expected, "{line}");
    }
    // Without --older-than: only the abandoned one; the table for people names it too.
    let abandoned = run(0, &["stuck", "--json"]).lines();
    assert_eq!(abandoned.len(), 1);
    assert_eq!(abandoned[0]["key_hash"], hex("T1").as_str());
    let table = run(0, &["stuck"]).stdout;
    assert!(
        table.contains(&hex("T1")[..16]) && table.contains("abandoned"),
        "{table}"
    );

    // Reconciliation of finance's list: each key's state, attempts, outcome status.
    let reconciled = run(
        0,
        &[
            "reconcile",
            "--key",
            "T1",
            "--key",
            "T2",
            "--key",
            "T3",
            "--json",
        ],
    )
    .lines();
    let states: Vec<&str> = reconciled
        .iter()
        .map(|l| l["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["abandoned", "completed", "absent"]);
    assert_eq!(reconciled[1]["outcome_status"], 200);
    assert_eq!(reconciled[0]["key"], "T1");
    assert_eq!(reconciled[0]["mechanism"], "http/grpc");
    // An unknown key is not found (exit 5), in JSON and for people alike.
    let unknown = run(5, &["inspect", "--key", "T3", "--json"]);
    assert!(unknown.stderr.contains("no record"), "{}", unknown.stderr);
    run(5, &["inspect", "--key", "T3"]);

    // Inspect: no body unless asked for; which front end wrote it, found without being told.
    let inspected = run(0, &["inspect", "--key", "T2", "--json"]).lines();
    assert_eq!(inspected[0]["state"], "completed");
    assert_eq!(inspected[0]["mechanism"], "http/grpc");
    assert!(inspected[0].get("body_base64").is_none());
    let with_body = run(0, &["inspect", "--key", "T2", "--body", "--json"]).lines();
    assert_eq!(with_body[0]["body_base64"], "cGFpZA==");
    // By its id as listed, shortened to a unique prefix: the store finds it by the prefix.
    let by_prefix = run(0, &["show", "--key-hash", &hex("T2")[..12], "--json"]).lines();
    assert_eq!(by_prefix[0]["key_hash"], hex("T2").as_str());

    // Release: refused without --yes (no terminal to ask on), then done; again: absent (3).
    run(2, &["release", "--key", "T1"]);
    assert!(store.get(&crashed).await.unwrap().is_some());
    run(
        0,
        &["release", "--key", "T1", "--yes", "--reason", "INC-25"],
    );
    assert!(store.get(&crashed).await.unwrap().is_none());
    run(5, &["release", "--key", "T1", "--yes"]);
    // A fence from another listing (another token) is refused; the record stays.
    run(3, &["release", "--key", "T6", "--token", "1", "--yes"]);
    assert!(store.get(&running).await.unwrap().is_some());
    // Release needs an in-progress record.
    let refused = run(3, &["release", "--key", "T2", "--yes", "--json"]).lines();
    assert_eq!(refused[0]["refusal"], "not_in_progress");

    // Complete by hand: an HTTP response the layer replays.
    run(
        0,
        &[
            "complete",
            "--key",
            "T4",
            "--status",
            "200",
            "--body",
            r#"{"ok":true}"#,
            "--yes",
        ],
    );
    let record = store.get(&by_hand).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Completed);
    let outcome = record.outcome.unwrap();
    assert_eq!(outcome.status, 200);
    assert!(outcome.body.windows(11).any(|w| w == br#"{"ok":true}"#));

    // Counts per state.
    let stats = run(0, &["stats", "--json"]).lines();
    assert_eq!(stats[0]["in_progress"], 1, "{}", stats[0]);
    assert_eq!(stats[0]["abandoned"], 0);
    let completed_now = if expires_natively { 2 } else { 3 };
    assert_eq!(stats[0]["completed"], completed_now, "{}", stats[0]);

    // Purge with a JSON lines archive.
    let archive = std::env::temp_dir().join(format!("{}.jsonl", unique_namespace("archive")));
    let archive_arg = archive.to_str().unwrap();
    let report = run(
        0,
        &[
            "purge",
            "--archive-file",
            archive_arg,
            "--yes",
            "--json",
            "--batch",
            "2",
        ],
    )
    .lines();
    assert!(store.get(&old).await.unwrap().is_none());
    if !expires_natively {
        assert_eq!(report[0]["purged"], 1, "{}", report[0]);
        let lines = std::fs::read_to_string(&archive).unwrap();
        assert!(lines.contains(&hex("T5")), "{lines}");
    }
    let _ = std::fs::remove_file(&archive);

    // Delete a completed record: its key runs again.
    run(0, &["delete", "--key", "T2", "--yes"]);
    let gone = run(0, &["reconcile", "--key", "T2", "--json"]).lines();
    assert_eq!(gone[0]["state"], "absent");
    assert!(
        store.get(&running).await.unwrap().is_some(),
        "T6 was never touched"
    );
}

#[tokio::test]
async fn every_command_on_redis() {
    let url = redis_url();
    let prefix = format!("{}:", unique_namespace("test:cli"));
    let store = match RedisStore::connect(&url).await {
        Ok(store) => store.with_key_prefix(prefix.clone()),
        Err(error) => return unavailable::<()>("Redis", error).unwrap_or_default(),
    };
    drill(&store, &["--store", &url, "--prefix", &prefix], true).await;
}

#[tokio::test]
async fn every_command_on_a_redis_cluster() {
    let nodes = std::env::var("REDIS_CLUSTER_URLS").unwrap_or_else(|_| {
        "redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003".to_owned()
    });
    let prefix = format!("{}:", unique_namespace("test:cli:cluster"));
    let store = match RedisStore::connect_cluster(nodes.split(',')).await {
        Ok(store) => store.with_key_prefix(prefix.clone()),
        Err(error) => return unavailable::<()>("Redis Cluster", error).unwrap_or_default(),
    };
    drill(&store, &["--store", &nodes, "--prefix", &prefix], true).await;
}

/// A SQL store on a fresh table, named to the binary by `--table`; the table's name.
async fn sql_drill<D>(store: SqlStore<D>, url: &str) -> String
where
    D: idempotency_sql::Dialect,
    SqlStore<D>: Operations,
{
    let table = unique_namespace("idem_cli").replace('.', "_");
    let store = store.with_table_name(&table).unwrap();
    store.migrate().await.unwrap();
    drill(&store, &["--store", url, "--table", &table], false).await;
    table
}

/// The actions of the drill on `table` were audited in the audit table that goes with it
/// (`<table>_audit`), with no `--audit-table` given: `(action, applied)` in order.
fn audited_actions(rows: Vec<(String, i64)>) -> Vec<(String, bool)> {
    rows.into_iter()
        .map(|(action, applied)| (action, applied == 1))
        .collect()
}

/// What the drill's actions leave in the audit table: each release, complete and delete that
/// reached the fence (refusals included), and the purge.
fn drill_audit() -> Vec<(String, bool)> {
    [
        ("release", true),
        ("release", false),
        ("release", false),
        ("complete", true),
        ("purge", true),
        ("delete", true),
    ]
    .iter()
    .map(|(action, applied)| ((*action).to_owned(), *applied))
    .collect()
}

/// A scan of a table that does not exist, or is not a record table, is not found (exit 5)
/// and names the table; so is one from IDEMPOTENCY_TABLE. An empty record table is no error,
/// and the answer names what was scanned. `not_records` is a table of another kind.
fn refuses_wrong_tables(url: &str, not_records: &str, empty_records: &str) {
    let missing = unique_namespace("no_such_table").replace('.', "_");
    for command in [
        vec!["stuck"],
        vec!["stats"],
        vec!["inspect", "--namespace", "n", "--key", "k"],
    ] {
        for table in [missing.as_str(), not_records] {
            let mut args = command.clone();
            args.extend(["--store", url, "--table", table]);
            let run = expect(5, &args);
            assert!(run.stderr.contains(table), "{args:?}: {}", run.stderr);
            let run = idempotency_with_env(
                &command,
                &[("IDEMPOTENCY_STORE_URL", url), ("IDEMPOTENCY_TABLE", table)],
            );
            assert_eq!(
                run.code, 5,
                "{command:?} with IDEMPOTENCY_TABLE={table}: {}",
                run.stderr
            );
        }
    }
    let empty = expect(0, &["stuck", "--store", url, "--table", empty_records]);
    assert!(
        empty
            .stdout
            .contains(&format!("0 stuck record(s) in table {empty_records} of ")),
        "{}",
        empty.stdout
    );
    let json = expect(
        0,
        &["stuck", "--store", url, "--table", empty_records, "--json"],
    );
    assert!(json.stdout.is_empty(), "{}", json.stdout);
    assert!(json.stderr.contains(empty_records), "{}", json.stderr);
}

/// A record the `#[idempotent]` front end wrote (its own key derivation) is found, released
/// and reconciled by its raw key alone, and named as a function's.
async fn finds_every_front_end<S: Store + Operations>(store: &S, store_args: &[&str]) {
    use idempotency_core::{ClaimId, ClaimRequest, Fingerprint};

    let namespace = unique_namespace("orders.fn");
    let scope = Scope::new(namespace.clone());
    let key = scope.storage_key_for(Mechanism::Function, "F1");
    store
        .claim(ClaimRequest {
            key: &key,
            namespace: &namespace,
            fingerprint: &Fingerprint::of_bytes(b"F1"),
            lease: Duration::from_secs(60),
            claim_id: ClaimId::random(),
            mechanism: None,
            key_derivation: None,
        })
        .await
        .unwrap();
    let with = |args: &[&str]| -> Vec<String> {
        let mut all: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        all.extend(store_args.iter().map(|a| (*a).to_owned()));
        all.extend(["--namespace".to_owned(), namespace.clone()]);
        all
    };
    let run = |code: i32, args: &[&str]| {
        let args = with(args);
        expect(code, &args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let inspected = run(0, &["inspect", "--key", "F1", "--json"]).lines();
    assert_eq!(inspected[0]["key_hash"], key.to_hex().as_str());
    assert_eq!(inspected[0]["mechanism"], "function");
    let reconciled = run(0, &["reconcile", "--key", "F1", "--json"]).lines();
    assert_eq!(reconciled.len(), 1);
    assert_eq!(reconciled[0]["mechanism"], "function");
    assert_eq!(reconciled[0]["state"], "in_progress");
    // Told the wrong front end: not found.
    run(5, &["inspect", "--key", "F1", "--mechanism", "http"]);
    run(0, &["release", "--key", "F1", "--yes", "--reason", "INC-9"]);
    assert!(store.get(&key).await.unwrap().is_none());
}

#[tokio::test]
async fn every_command_on_postgres() {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let pool = match sqlx::PgPool::connect(&url).await {
        Ok(pool) => pool,
        Err(error) => return unavailable::<()>("PostgreSQL", error).unwrap_or_default(),
    };
    let table = sql_drill(PostgresStore::new(pool.clone()), &url).await;
    let rows = sqlx::query_as(&format!(
        "SELECT action, applied FROM \"{table}_audit\" ORDER BY id"
    ))
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(audited_actions(rows), drill_audit());
    let store = PostgresStore::new(pool.clone())
        .with_table_name(&table)
        .unwrap();
    finds_every_front_end(&store, &["--store", &url, "--table", &table]).await;

    let other = unique_namespace("orders").replace('.', "_");
    sqlx::query(&format!(
        "CREATE TABLE \"{other}\" (id BIGINT PRIMARY KEY, note TEXT)"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let empty = unique_namespace("idem_empty").replace('.', "_");
    let store = PostgresStore::new(pool).with_table_name(&empty).unwrap();
    store.migrate().await.unwrap();
    refuses_wrong_tables(&url, &other, &empty);
}

#[tokio::test]
async fn every_command_on_mariadb() {
    let url = std::env::var("MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned());
    let pool = match sqlx::MySqlPool::connect(&url).await {
        Ok(pool) => pool,
        Err(error) => return unavailable::<()>("MySQL", error).unwrap_or_default(),
    };
    let table = sql_drill(MySqlStore::new(pool.clone()), &url).await;
    let rows: Vec<(String, i64)> = sqlx::query_as(&format!(
        "SELECT action, applied FROM `{table}_audit` ORDER BY id"
    ))
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(audited_actions(rows), drill_audit());
    let store = MySqlStore::new(pool.clone())
        .with_table_name(&table)
        .unwrap();
    finds_every_front_end(&store, &["--store", &url, "--table", &table]).await;

    let other = unique_namespace("orders").replace('.', "_");
    sqlx::query(&format!(
        "CREATE TABLE `{other}` (id BIGINT PRIMARY KEY, note TEXT)"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let empty = unique_namespace("idem_empty").replace('.', "_");
    let store = MySqlStore::new(pool).with_table_name(&empty).unwrap();
    store.migrate().await.unwrap();
    refuses_wrong_tables(&url, &other, &empty);
}

#[tokio::test]
async fn every_command_on_sqlite() {
    let dir = std::env::temp_dir().join("idempotency-sql-tests");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}.db", unique_namespace("cli")));
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    let table = sql_drill(SqliteStore::new(pool.clone()), &url).await;
    let rows = sqlx::query_as(&format!(
        "SELECT action, applied FROM \"{table}_audit\" ORDER BY id"
    ))
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(audited_actions(rows), drill_audit());
    let store = SqliteStore::new(pool.clone())
        .with_table_name(&table)
        .unwrap();
    finds_every_front_end(&store, &["--store", &url, "--table", &table]).await;

    let other = unique_namespace("orders").replace('.', "_");
    sqlx::query(&format!(
        "CREATE TABLE \"{other}\" (id BIGINT PRIMARY KEY, note TEXT)"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let empty = unique_namespace("idem_empty").replace('.', "_");
    let store = SqliteStore::new(pool).with_table_name(&empty).unwrap();
    store.migrate().await.unwrap();
    refuses_wrong_tables(&url, &other, &empty);
}

/// On Redis, a prefix under which no key exists is not found (exit 5, naming the prefix),
/// from `--prefix` or IDEMPOTENCY_PREFIX; records of another front end are found by raw key.
#[tokio::test]
async fn a_redis_prefix_without_keys_is_not_found() {
    let url = redis_url();
    let prefix = format!("{}:", unique_namespace("test:cli:empty"));
    let store = match RedisStore::connect(&url).await {
        Ok(store) => store.with_key_prefix(prefix.clone()),
        Err(error) => return unavailable::<()>("Redis", error).unwrap_or_default(),
    };
    let run = expect(5, &["stuck", "--store", &url, "--prefix", &prefix]);
    assert!(run.stderr.contains(&prefix), "{}", run.stderr);
    expect(5, &["stats", "--store", &url, "--prefix", &prefix]);
    let run = idempotency_with_env(
        &["stuck", "--json"],
        &[
            ("IDEMPOTENCY_STORE_URL", url.as_str()),
            ("IDEMPOTENCY_PREFIX", prefix.as_str()),
        ],
    );
    assert_eq!(run.code, 5, "{}", run.stderr);
    finds_every_front_end(&store, &["--store", &url, "--prefix", &prefix]).await;
}

/// Exit code 4: a store that does not answer, of every kind.
#[test]
fn an_unreachable_store_is_exit_code_4() {
    for url in [
        "redis://127.0.0.1:1",
        "redis://127.0.0.1:1,redis://127.0.0.1:2",
        "postgres://postgres@127.0.0.1:1/test",
        "mysql://root@127.0.0.1:1/test",
    ] {
        let run = expect(4, &["stuck", "--store", url]);
        assert!(run.stderr.contains("unreachable"), "{url}: {}", run.stderr);
    }
}

/// Exit code 2: no store, an unknown scheme, a duration without unit, a missing namespace.
#[test]
fn usage_errors_are_exit_code_2() {
    expect(2, &["stuck"]);
    expect(2, &["stuck", "--store", "http://127.0.0.1:1"]);
    expect(
        2,
        &[
            "stuck",
            "--store",
            "redis://127.0.0.1:1",
            "--older-than",
            "10",
        ],
    );
    expect(
        2,
        &["release", "--store", "redis://127.0.0.1:1", "--key", "T1"],
    );
    expect(2, &["frobnicate"]);
}

/// The store URL from the environment, so that passwords stay out of argv.
#[test]
fn the_store_url_comes_from_the_environment() {
    let output = Command::new(env!("CARGO_BIN_EXE_idempotency"))
        .args(["stats"])
        .env("IDEMPOTENCY_STORE_URL", "redis://127.0.0.1:1")
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(4),
        "read the URL, found no server"
    );
}
