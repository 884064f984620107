//! The `idempotency` binary, run as an operator runs it, against the real stores: Redis
//! (`REDIS_URL`, default `redis://127.0.0.1:6379`), a Redis Cluster (`REDIS_CLUSTER_URLS`,
//! default the three loopback ports of `.ci/redis-cluster.sh`), PostgreSQL (`DATABASE_URL`),
//! MariaDB/MySQL (`MYSQL_URL`) and SQLite (a file under the temporary directory). A server that
//! does not answer skips its test (printed), or fails it under `CI=true`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::Duration;

use idempotency_core::operations::Operations;
use idempotency_core::redis::RedisStore;
use idempotency_core::sql::{MySqlStore, PostgresStore, SqlStore, SqliteStore};
use idempotency_core::testing::{claimed, completed, unavailable, unique_namespace};
use idempotency_core::{Mechanism, Outcome, RecordState, Scope, Store};
use serde_json::Value;

/// What one run of the binary gave.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The JSON objects printed, one per line.
    fn lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")))
            .collect()
    }
}

/// Runs `idempotency` with `args`, stdin closed (no terminal: destructive actions need --yes).
fn idempotency(args: &[&str]) -> Run {
    let output = Command::new(env!("CARGO_BIN_EXE_idempotency"))
        .args(args)
        .env_remove("IDEMPOTENCY_STORE_URL")
        .stdin(Stdio::null())
        .output()
        .expect("run idempotency");
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Runs and expects exit code `code`.
fn expect(code: i32, args: &[&str]) -> Run {
    let run = idempotency(args);
    assert_eq!(
        run.code, code,
        "idempotency {args:?}\nstdout: {}\nstderr: {}",
        run.stdout, run.stderr
    );
    run
}

/// Every subcommand on `store`, which `store_args` (`--store URL` and `--table`/`--prefix`)
/// name to the binary. `expires_natively`: Redis deletes expired records itself.
async fn drill<S: Store + Operations>(store: &S, store_args: &[&str], expires_natively: bool) {
    let namespace = unique_namespace("payments.callback");
    let scope = Scope::new(namespace.clone());
    let hex = |raw: &str| scope.storage_key_for(Mechanism::Request, raw).to_hex();
    let long = Duration::from_secs(60);
    let crashed = claimed(store, &scope, "T1", Duration::from_millis(100)).await;
    completed(store, &scope, "T2", &Outcome::new(200, "paid"), long).await;
    let by_hand = claimed(store, &scope, "T4", long).await;
    let running = claimed(store, &scope, "T6", long).await;
    let old = completed(
        store,
        &scope,
        "T5",
        &Outcome::new(200, "old"),
        Duration::from_millis(1),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1200)).await;

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

    // Inspect: no body unless asked for.
    let inspected = run(0, &["inspect", "--key", "T2", "--json"]).lines();
    assert_eq!(inspected[0]["state"], "completed");
    assert!(inspected[0].get("body_base64").is_none());
    let with_body = run(0, &["inspect", "--key", "T2", "--body", "--json"]).lines();
    assert_eq!(with_body[0]["body_base64"], "cGFpZA==");

    // Release: refused without --yes (no terminal to ask on), then done; again: absent (3).
    run(2, &["release", "--key", "T1"]);
    assert!(store.get(&crashed).await.unwrap().is_some());
    run(
        0,
        &["release", "--key", "T1", "--yes", "--reason", "INC-25"],
    );
    assert!(store.get(&crashed).await.unwrap().is_none());
    run(3, &["release", "--key", "T1", "--yes"]);
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

fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
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

/// A SQL store on a fresh table, named to the binary by `--table`.
async fn sql_drill<D>(store: SqlStore<D>, url: &str)
where
    D: idempotency_core::sql::Dialect,
    SqlStore<D>: Operations,
{
    let table = unique_namespace("idem_cli").replace('.', "_");
    let store = store.with_table_name(&table).unwrap();
    store.migrate().await.unwrap();
    drill(&store, &["--store", url, "--table", &table], false).await;
}

#[tokio::test]
async fn every_command_on_postgres() {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    match sqlx::PgPool::connect(&url).await {
        Ok(pool) => sql_drill(PostgresStore::new(pool), &url).await,
        Err(error) => unavailable::<()>("PostgreSQL", error).unwrap_or_default(),
    }
}

#[tokio::test]
async fn every_command_on_mariadb() {
    let url = std::env::var("MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned());
    match sqlx::MySqlPool::connect(&url).await {
        Ok(pool) => sql_drill(MySqlStore::new(pool), &url).await,
        Err(error) => unavailable::<()>("MySQL", error).unwrap_or_default(),
    }
}

#[tokio::test]
async fn every_command_on_sqlite() {
    let dir = std::env::temp_dir().join("idempotency-sql-tests");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}.db", unique_namespace("cli")));
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    sql_drill(SqliteStore::new(pool), &url).await;
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

/// `outbox stats|dead|revive` on a PostgreSQL outbox (`DATABASE_URL`) the test fills: one
/// pending, one sent, one dead message. The dead one is listed with its reason (its payload
/// only when asked), revived only with `--yes` (exit 2 otherwise), then pending; reviving it
/// again, or an unknown id, is exit 3. A table that does not exist is exit 1, Redis exit 2, a
/// server that does not answer exit 4.
#[tokio::test]
async fn outbox_stats_dead_and_revive_on_postgres() {
    use idempotency_core::IdempotencyKey;
    use idempotency_core::sql::outbox::{ClaimBatch, OutboxTable};
    use idempotency_core::sql::{Outbox, OutboxMessage};

    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let pool = match sqlx::PgPool::connect(&url).await {
        Ok(pool) => pool,
        Err(error) => return unavailable::<()>("PostgreSQL", error).unwrap_or_default(),
    };
    let table = unique_namespace("outbox").replace(['.', '-'], "_");
    let outbox = Outbox::postgres(pool).with_table_name(&table).unwrap();
    outbox.migrate().await.unwrap();
    let scope = Scope::new("coupon.grant");
    let messages: Vec<OutboxMessage> = ["T1", "T2", "T3"]
        .iter()
        .map(|key| {
            let key = IdempotencyKey::parse(key).unwrap();
            OutboxMessage::new(&scope, &key, "coupons", format!("grant {key}"))
        })
        .collect();
    let mut tx = outbox.pool().begin().await.unwrap();
    for message in &messages {
        assert!(outbox.enqueue(&mut tx, message).await.unwrap());
    }
    tx.commit().await.unwrap();
    let batch = |claim| ClaimBatch {
        limit: 1,
        lease: Duration::from_secs(60),
        claim,
    };
    let sent = outbox.claim(batch(1)).await.unwrap();
    assert_eq!(outbox.mark_sent(1, &[sent[0].seq]).await.unwrap(), 1);
    let refused = outbox.claim(batch(2)).await.unwrap();
    outbox
        .mark_failed(2, refused[0].seq, "unroutable", Duration::ZERO, true)
        .await
        .unwrap();
    let dead_id = refused[0].message.id.as_str();

    let with = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["outbox".to_owned()];
        all.extend(args.iter().map(|a| (*a).to_owned()));
        all.extend([
            "--store".to_owned(),
            url.clone(),
            "--table".to_owned(),
            table.clone(),
        ]);
        all
    };
    let run = |code: i32, args: &[&str]| {
        let args = with(args);
        expect(code, &args.iter().map(String::as_str).collect::<Vec<_>>())
    };

    let stats = run(0, &["stats", "--json"]).lines();
    assert_eq!(stats.len(), 1);
    let counts = (&stats[0]["pending"], &stats[0]["sent"], &stats[0]["dead"]);
    assert_eq!(counts, (&1.into(), &1.into(), &1.into()), "{}", stats[0]);
    assert_eq!(stats[0]["table"], table.as_str());
    let text = run(0, &["stats"]).stdout;
    assert!(text.contains("dead     1"), "{text}");

    let dead = run(0, &["dead", "--json"]).lines();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0]["id"], dead_id);
    assert_eq!(dead[0]["last_error"], "unroutable");
    assert_eq!(dead[0]["attempts"], 1);
    assert_eq!(dead[0]["business_key"], "T2");
    assert!(
        dead[0].get("payload_base64").is_none(),
        "no payload unless asked"
    );
    let with_payload = run(0, &["dead", "--json", "--payload"]).lines();
    assert_eq!(with_payload[0]["payload_base64"], "Z3JhbnQgVDI=");
    let table_text = run(0, &["dead"]).stdout;
    assert!(
        table_text.contains(dead_id) && table_text.contains("unroutable"),
        "{table_text}"
    );

    run(2, &["revive", "--id", dead_id]);
    assert_eq!(
        outbox.counts().await.unwrap().dead,
        1,
        "not confirmed: untouched"
    );
    let revived = run(
        0,
        &[
            "revive", "--id", dead_id, "--yes", "--reason", "INC-7", "--json",
        ],
    )
    .lines();
    assert_eq!(revived[0]["revived"], true);
    let counts = outbox.counts().await.unwrap();
    assert_eq!((counts.pending, counts.sent, counts.dead), (2, 1, 0));
    let again = run(3, &["revive", "--id", dead_id, "--yes"]);
    assert!(again.stderr.contains("not dead"), "{}", again.stderr);
    run(3, &["revive", "--id", "no-such-message", "--yes"]);

    let missing = expect(
        1,
        &[
            "outbox",
            "stats",
            "--store",
            &url,
            "--table",
            "no_such_outbox_table",
        ],
    );
    assert!(
        missing.stderr.contains("no_such_outbox_table"),
        "{}",
        missing.stderr
    );
    expect(2, &["outbox", "stats", "--store", "redis://127.0.0.1:1"]);
    let down = expect(
        4,
        &[
            "outbox",
            "dead",
            "--store",
            "postgres://postgres@127.0.0.1:1/test",
        ],
    );
    assert!(down.stderr.contains("unreachable"), "{}", down.stderr);
}
