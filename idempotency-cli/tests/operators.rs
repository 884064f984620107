//! What an operator sees and names, against the real stores (Redis `REDIS_URL`, PostgreSQL
//! `DATABASE_URL`): ids that the next command takes (whole or a unique prefix), the front end
//! that wrote a record, one view of a two-tier consumer's fast tier and truth, and a purge
//! that keeps what a table's TTL keeps. A server that does not answer skips its test
//! (printed), or fails it under `CI=true`.
#![cfg(all(feature = "postgres", feature = "redis"))]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod support;

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use idempotency_core::{ClaimId, ClaimRequest, Fingerprint, Mechanism, Outcome, Scope, Store};
use idempotency_redis::RedisStore;
use idempotency_sql::PostgresStore;
use idempotency_test::{claimed, completed, unavailable, unique_namespace};
use support::{expect, redis_url};

fn postgres_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A migrated PostgreSQL store on a fresh table (`ttl`: the TTL it is configured with).
async fn postgres(ttl: Option<Duration>) -> Option<(PostgresStore, String)> {
    let pool = match sqlx::PgPool::connect(&postgres_url()).await {
        Ok(pool) => pool,
        Err(error) => return unavailable("PostgreSQL", error),
    };
    let table = unique_namespace("idem_ops").replace('.', "_");
    let mut store = PostgresStore::new(pool).with_table_name(&table).unwrap();
    if let Some(ttl) = ttl {
        store = store.with_table_ttl(ttl);
    }
    store.migrate().await.unwrap();
    Some((store, table))
}

/// Claims `raw` under `mechanism`'s key derivation in `scope`.
async fn claim_as<S: Store>(store: &S, scope: &Scope, mechanism: Mechanism, raw: &str) {
    let key = scope.storage_key_for(mechanism, raw);
    store
        .claim(ClaimRequest {
            key: &key,
            namespace: scope.namespace(),
            fingerprint: &Fingerprint::of_bytes(raw.as_bytes()),
            lease: Duration::from_secs(60),
            claim_id: ClaimId::random(),
            mechanism: Some(mechanism),
            key_derivation: None,
        })
        .await
        .unwrap();
}

/// Two raw keys whose storage keys in `scope` share their first 8 hex characters (a search of
/// about 2^16 keys), and that prefix.
fn colliding(scope: &Scope) -> (String, String, String) {
    let mut seen: HashMap<String, String> = HashMap::new();
    for n in 0u64.. {
        let raw = format!("C{n}");
        let hex = scope.storage_key_for(Mechanism::Request, &raw).to_hex();
        let prefix = hex[..8].to_owned();
        if let Some(first) = seen.insert(prefix.clone(), raw.clone()) {
            return (first, raw, prefix);
        }
    }
    unreachable!()
}

/// Every id a listing prints is taken back, whole or by a unique prefix; a raw key with
/// records of two front ends, or a prefix of two records, lists their ids (exit 6) instead of
/// asking for a front end's name; the front end that wrote a record is shown where known.
#[tokio::test]
async fn ids_are_taken_back_and_no_front_end_needs_naming() {
    let Some((store, table)) = postgres(None).await else {
        return;
    };
    let url = postgres_url();
    let namespace = unique_namespace("ops.ids");
    let scope = Scope::new(namespace.clone());
    let base = [
        "--store",
        url.as_str(),
        "--table",
        &table,
        "--namespace",
        &namespace,
    ];
    let run = |code: i32, args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(base);
        expect(code, &all)
    };

    // One raw key, two front ends: the ids to choose from, no front end to name.
    claim_as(&store, &scope, Mechanism::Request, "K1").await;
    claim_as(&store, &scope, Mechanism::Function, "K1").await;
    let request = scope.storage_key_for(Mechanism::Request, "K1").to_hex();
    let function = scope.storage_key_for(Mechanism::Function, "K1").to_hex();
    let both = run(6, &["release", "--key", "K1", "--yes"]);
    assert!(
        both.stderr.contains(&request) && both.stderr.contains(&function),
        "{}",
        both.stderr
    );
    assert!(both.stderr.contains("--key-hash"), "{}", both.stderr);

    // The listing's ids: the table names them in full, with a MECHANISM column.
    let table_out = run(0, &["stuck", "--older-than", "0s"]).stdout;
    assert!(table_out.contains("MECHANISM"), "{table_out}");
    assert!(table_out.contains(&request), "{table_out}");
    let listed = run(0, &["stuck", "--older-than", "0s", "--json"]).lines();
    let ids: BTreeSet<&str> = listed
        .iter()
        .map(|line| line["key_hash"].as_str().unwrap())
        .collect();
    assert_eq!(ids, BTreeSet::from([request.as_str(), function.as_str()]));
    let mechanisms: BTreeSet<&str> = listed
        .iter()
        .map(|line| line["mechanism"].as_str().unwrap())
        .collect();
    assert_eq!(mechanisms, BTreeSet::from(["http/grpc", "function"]));

    // A unique prefix of 8 is taken by show (inspect), reconcile and release.
    let shown = run(0, &["show", "--key-hash", &function[..8], "--json"]).lines();
    assert_eq!(shown[0]["key_hash"], function.as_str());
    let reconciled = run(0, &["reconcile", "--key-hash", &function[..10], "--json"]).lines();
    assert_eq!(reconciled[0]["key_hash"], function.as_str());
    assert_eq!(reconciled[0]["state"], "in_progress");
    run(0, &["release", "--key-hash", &function[..8], "--yes"]);
    assert!(
        store
            .get(&scope.storage_key_for(Mechanism::Function, "K1"))
            .await
            .unwrap()
            .is_none()
    );
    // Now one record of K1: found by its raw key, its front end named.
    let inspected = run(0, &["inspect", "--key", "K1", "--json"]).lines();
    assert_eq!(inspected[0]["mechanism"], "http/grpc");
    // Too short, or not hex: usage (exit 2); a prefix of nothing: not found (exit 5).
    run(2, &["show", "--key-hash", &request[..7]]);
    run(2, &["show", "--key-hash", "zzzzzzzz"]);
    let absent = if request.starts_with("00000000") {
        "ffffffff"
    } else {
        "00000000"
    };
    run(5, &["show", "--key-hash", absent]);

    // Two records under one prefix: ambiguous (exit 6), both ids printed.
    let (first, second, prefix) = colliding(&scope);
    claim_as(&store, &scope, Mechanism::Request, &first).await;
    claim_as(&store, &scope, Mechanism::Request, &second).await;
    let ambiguous = run(6, &["release", "--key-hash", &prefix, "--yes"]);
    for raw in [&first, &second] {
        let id = scope.storage_key_for(Mechanism::Request, raw).to_hex();
        assert!(ambiguous.stderr.contains(&id), "{}", ambiguous.stderr);
    }
    run(6, &["reconcile", "--key-hash", &prefix]);
}

/// `stuck --truth`: one view of a two-tier consumer. A fast-tier claim (Redis, abandoned)
/// whose storage key the truth (PostgreSQL) holds completed is left out and counted; one with
/// no truth record, or with a truth record in progress, is listed, and so is the truth's own
/// stuck record, each with its tier. Nothing is written to either store.
#[tokio::test]
async fn one_view_of_both_tiers_hides_what_the_truth_settled() {
    let Some((truth, table)) = postgres(None).await else {
        return;
    };
    let redis = redis_url();
    let prefix = format!("{}:", unique_namespace("test:ops:tiers"));
    let fast = match RedisStore::connect(&redis).await {
        Ok(store) => store.with_key_prefix(prefix.clone()),
        Err(error) => return unavailable::<()>("Redis", error).unwrap_or_default(),
    };
    let namespace = unique_namespace("coupon-grant");
    let scope = Scope::new(namespace.clone());
    let short = Duration::from_millis(1);
    // Killed consumers' fast-tier claims, their leases ended.
    let settled = claimed(&fast, &scope, "settled", short).await;
    let orphan = claimed(&fast, &scope, "orphan", short).await;
    let running = claimed(&fast, &scope, "running", short).await;
    // The truth: the redelivery of "settled" completed there; "running" still in progress,
    // abandoned too.
    completed(
        &truth,
        &scope,
        "settled",
        &Outcome::new(0, "granted"),
        Duration::from_secs(600),
    )
    .await;
    let running_truth = claimed(&truth, &scope, "running", short).await;
    let before = (
        fast.get(&settled).await.unwrap(),
        truth.get(&running_truth).await.unwrap(),
    );

    let fast_args = ["--store", redis.as_str(), "--prefix", &prefix];
    let tiers = [
        "--truth",
        &postgres_url(),
        "--truth-table",
        &table,
        "--namespace",
        &namespace,
    ]
    .map(str::to_owned);
    let stuck = |json: bool| {
        let mut args = vec!["stuck"];
        args.extend(fast_args);
        args.extend(tiers.iter().map(String::as_str));
        if json {
            args.push("--json");
        }
        expect(0, &args)
    };
    // Waits for the event: the fast tier itself reports its three claims abandoned.
    loop {
        let mut args = vec!["stuck", "--json", "--namespace", &namespace];
        args.extend(fast_args);
        if expect(0, &args).lines().len() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let run = stuck(true);
    let seen: BTreeSet<(String, String)> = run
        .lines()
        .iter()
        .map(|line| {
            assert_eq!(line["state"], "abandoned", "{line}");
            (
                line["tier"].as_str().unwrap().to_owned(),
                line["key_hash"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected = BTreeSet::from([
        ("fast".to_owned(), orphan.to_hex()),
        ("fast".to_owned(), running.to_hex()),
        ("truth".to_owned(), running.to_hex()),
    ]);
    assert_eq!(seen, expected);
    assert!(
        run.stderr.contains("1 fast-tier claim(s) left out"),
        "{}",
        run.stderr
    );
    let table_out = stuck(false).stdout;
    assert!(table_out.contains("TIER"), "{table_out}");
    assert!(!table_out.contains(&settled.to_hex()), "{table_out}");

    // Read only: the settled claim and the truth's record are as they were.
    let after = (
        fast.get(&settled).await.unwrap(),
        truth.get(&running_truth).await.unwrap(),
    );
    assert_eq!(before, after);
    // The truth must be SQL.
    let mut wrong = vec!["stuck", "--truth", redis.as_str()];
    wrong.extend(fast_args);
    expect(2, &wrong);
}

/// A table configured with a TTL keeps, through `idempotency purge`, every record last
/// written less than that long ago, whatever `--grace` says, and the purge says so.
#[tokio::test]
async fn a_purge_keeps_what_the_table_ttl_keeps() {
    let hour = Duration::from_secs(3600);
    let Some((store, table)) = postgres(Some(hour)).await else {
        return;
    };
    let url = postgres_url();
    let scope = Scope::new(unique_namespace("ops.floor"));
    let done = completed(
        &store,
        &scope,
        "by-hand",
        &Outcome::new(200, "x"),
        Duration::from_millis(1),
    )
    .await;
    let crashed = claimed(&store, &scope, "crashed", Duration::from_millis(1)).await;
    // Waits for the event: both records past their own expiry, by the store's own listing.
    loop {
        let listed = expect(
            0,
            &[
                "stats",
                "--store",
                &url,
                "--table",
                &table,
                "--namespace",
                scope.namespace(),
                "--json",
            ],
        )
        .lines();
        if listed[0]["abandoned"] == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let purge = expect(
        0,
        &[
            "purge", "--store", &url, "--table", &table, "--grace", "0s", "--yes", "--json",
        ],
    );
    assert!(
        purge.stderr.contains("configured with a record TTL of 1h"),
        "{}",
        purge.stderr
    );
    assert_eq!(purge.lines()[0]["purged"], 0, "{}", purge.stdout);
    for key in [done, crashed] {
        assert!(store.get(&key).await.unwrap().is_some());
    }
}

/// A run with steps that stopped part-way: `stuck` shows the step it stopped at, `show` its
/// checkpoints' step too, and `resume` (fenced, audited) ends its lease and counts its
/// attempts from 1, its checkpoints kept, so that the next claim takes it over at once.
#[tokio::test]
async fn a_stopped_run_shows_its_step_and_resumes() {
    use idempotency_core::{Progress, StepResult};
    use idempotency_sql::StepStore;

    let Some((store, table)) = postgres(None).await else {
        return;
    };
    let url = postgres_url();
    let namespace = unique_namespace("ops.steps");
    let scope = Scope::new(namespace.clone());
    let run = |code: i32, args: &[&str]| {
        let mut all = args.to_vec();
        all.extend([
            "--store",
            url.as_str(),
            "--table",
            &table,
            "--namespace",
            &namespace,
        ]);
        expect(code, &all)
    };
    // A run that completed `reserve` and `capture`, then its owner died (a lease of 60 s).
    claim_as(&store, &scope, Mechanism::Request, "R1").await;
    let key = scope.storage_key_for(Mechanism::Request, "R1");
    let claimed = store.get(&key).await.unwrap().unwrap();
    let mut progress = Progress::new(b"{}".to_vec());
    progress
        .steps
        .push(StepResult::new("reserve", serde_json::json!(1)));
    progress
        .steps
        .push(StepResult::new("capture", serde_json::json!("cap_1")));
    let mut conn = store.pool().acquire().await.unwrap();
    store
        .checkpoint_on(
            &mut conn,
            &key,
            claimed.token,
            &progress,
            Duration::from_secs(60),
        )
        .await
        .unwrap();

    let listed = run(0, &["stuck", "--older-than", "0s", "--json"]).lines();
    assert_eq!(listed[0]["step"], "capture");
    let table_out = run(0, &["stuck", "--older-than", "0s"]).stdout;
    assert!(
        table_out.contains("STEP") && table_out.contains("capture"),
        "{table_out}"
    );
    let shown = run(0, &["show", "--key", "R1", "--json"]).lines();
    assert_eq!(shown[0]["step"], "capture");

    let hex = key.to_hex();
    let resumed = run(
        0,
        &[
            "resume",
            "--key-hash",
            &hex,
            "--yes",
            "--reason",
            "INC-38",
            "--json",
        ],
    );
    assert_eq!(resumed.lines()[0]["applied"], true, "{}", resumed.stdout);
    let after = store.get(&key).await.unwrap().unwrap();
    assert_eq!(after.attempts, 1);
    assert!(
        after.expires_at <= std::time::SystemTime::now(),
        "the lease ended"
    );
    assert_eq!(after.progress, Some(progress), "the checkpoints stay");
    // Fenced: the record as listed before the resume (its token and last write) no longer
    // holds.
    let token = listed[0]["token"].to_string();
    let written = listed[0]["updated_at_ms"].to_string();
    let mut stale = vec!["resume", "--key-hash", hex.as_str(), "--yes"];
    stale.extend([
        "--token",
        token.as_str(),
        "--updated-at-ms",
        written.as_str(),
    ]);
    run(3, &stale);
    // The next claim takes the run over at once, after its last checkpoint.
    let taken = store
        .claim(ClaimRequest {
            key: &key,
            namespace: &namespace,
            fingerprint: &Fingerprint::of_bytes(b"R1"),
            lease: Duration::from_secs(60),
            claim_id: ClaimId::random(),
            mechanism: Some(Mechanism::Request),
            key_derivation: None,
        })
        .await
        .unwrap();
    let idempotency_core::Claim::Acquired(taken) = taken else {
        panic!("a resumed run is taken over at once, got {taken:?}");
    };
    assert!(taken.took_over);
    let record = store.get(&key).await.unwrap().unwrap();
    assert_eq!(record.progress.unwrap().stopped_at(), Some("capture"));
}
