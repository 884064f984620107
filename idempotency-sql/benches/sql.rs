//! SQL stores against raw sqlx statements doing the same work with the same number of
//! statements, in one run, on the real servers.
//!
//! ```text
//! cargo bench -p idempotency-sql --features postgres,sqlite,mysql,testing --bench sql
//! ```
//!
//! Two baselines per operation, each with the same number of statements as the store:
//!
//! - **identical**: the store's own SQL text run through raw sqlx on an identical table (what
//!   the store costs over hand-coding its statements: row mapping, `Arc`s, error mapping). The
//!   floor is ≥ 0.9.
//! - **hand-written**: the plain dedup-table statements a service would write by hand, on an
//!   identical table. *claim+complete*: PostgreSQL `INSERT … ON CONFLICT DO NOTHING RETURNING` +
//!   `UPDATE` (2 vs 2); MySQL `INSERT IGNORE` + `UPDATE` (store 3 vs 2: it reads first);
//!   SQLite `SELECT` + `INSERT … RETURNING` + `UPDATE` (3 vs 3). *replay*: PostgreSQL and
//!   SQLite a plain `SELECT` (1 vs 1; it does less: it could not claim a free key); MySQL
//!   `INSERT IGNORE` + `SELECT` (store 1 vs 2: insert, on a duplicate read the stored result).
//!
//! Baselines take a pooled connection per call the way the store does (the store's `claim` and
//! `complete` are separate calls, each acquiring one).
//!
//! Each pair runs at 1 and 16 concurrent tasks (pool of 16) for `BENCH_SECONDS` (default 2)
//! per round, alternating store and baseline for `BENCH_ROUNDS` rounds (default 3; under
//! `cargo test --benches`, one round of 50 ms: a smoke run, as CI runs it); the table
//! shows the median round and the ratio store/baseline (≥ 1: the store is as fast). URLs:
//! `DATABASE_URL`, `MYSQL_URL` (local defaults); SQLite uses a file in the temp directory.
//! `BENCH_ONLY=postgres|mysql|sqlite` runs one backend.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use idempotency_core::{
    Claim, ClaimId, ClaimRequest, CompleteRequest, Fingerprint, Outcome, StorageKey, Store,
};
use idempotency_sql::{MySqlStore, PostgresStore, SqliteStore};
use idempotency_test::unique_key;
use sqlx::SqlitePool;

type Op = Arc<dyn Fn(u64) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

const LEASE: Duration = Duration::from_secs(60);
const TTL: Duration = Duration::from_secs(3600);
const TASKS: [usize; 2] = [1, 16];

fn outcome() -> Outcome {
    Outcome::new(200, vec![b'x'; 256])
}

/// A claimer's id, as the store binds it with every claim.
fn claim_id() -> Vec<u8> {
    ClaimId::random().as_bytes().to_vec()
}

fn fingerprint() -> Fingerprint {
    Fingerprint::of_bytes(b"bench")
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// Runs `op` on `tasks` concurrent tasks for `seconds`; returns operations per second.
async fn throughput<F, Fut>(tasks: usize, seconds: Duration, op: F) -> f64
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let (op, stop, done) = (Arc::clone(&op), Arc::clone(&stop), Arc::clone(&done));
            tokio::spawn(async move {
                let mut index = task as u64 * 1_000_000_000;
                while !stop.load(Ordering::Relaxed) {
                    op(index).await;
                    index += 1;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    tokio::time::sleep(seconds).await;
    stop.store(true, Ordering::Relaxed);
    for handle in handles {
        handle.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Boxes an operation (store and baselines alike, so both pay the same boxing).
fn op<F, Fut>(f: F) -> Op
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    Arc::new(move |index| Box::pin(f(index)))
}

/// One operation of one backend: the store and its baselines.
struct Case {
    backend: &'static str,
    name: &'static str,
    store: Op,
    baselines: Vec<(&'static str, &'static str, Op)>,
}

/// How long each side runs per round, and how many rounds: `BENCH_SECONDS` and `BENCH_ROUNDS`
/// under `cargo bench` (which passes `--bench`); under `cargo test --benches`, a smoke run of
/// every case that fails when an operation fails.
fn schedule() -> (Duration, u64) {
    if std::env::args().any(|arg| arg == "--bench") {
        (
            Duration::from_secs(env_number("BENCH_SECONDS", 2)),
            env_number("BENCH_ROUNDS", 3).max(1),
        )
    } else {
        (Duration::from_millis(50), 1)
    }
}

async fn run_case(case: Case) {
    let (seconds, rounds) = schedule();
    for (baseline, statements, raw) in &case.baselines {
        for tasks in TASKS {
            let (mut store, mut base) = (Vec::new(), Vec::new());
            for _ in 0..rounds {
                let op = Arc::clone(&case.store);
                store.push(throughput(tasks, seconds, move |i| op(i)).await);
                let op = Arc::clone(raw);
                base.push(throughput(tasks, seconds, move |i| op(i)).await);
            }
            let (store, base) = (median(store), median(base));
            println!(
                "| {} | {} | {baseline} | {statements} | {tasks} | {store:.0} | {base:.0} | {:.2} |",
                case.backend,
                case.name,
                store / base
            );
        }
    }
}

/// A distinct key per operation of a run.
fn key(run: u64, index: u64) -> StorageKey {
    let mut bytes = unique_key().0;
    bytes[..8].copy_from_slice(&run.to_be_bytes());
    bytes[8..16].copy_from_slice(&index.to_be_bytes());
    StorageKey(bytes)
}

fn request<'a>(key: &'a StorageKey, fp: &'a Fingerprint) -> ClaimRequest<'a> {
    ClaimRequest {
        key,
        namespace: "bench",
        fingerprint: fp,
        lease: LEASE,
        claim_id: idempotency_core::ClaimId::random(),
        mechanism: None,
        key_derivation: None,
    }
}

async fn store_claim_complete<S: Store>(store: &S, key: StorageKey) {
    let fp = fingerprint();
    let Claim::Acquired(lease) = store.claim(request(&key, &fp)).await.unwrap() else {
        panic!("fresh key");
    };
    store
        .complete(CompleteRequest {
            key: &key,
            token: lease.token,
            outcome: &outcome(),
            ttl: TTL,
        })
        .await
        .unwrap();
}

async fn store_replay<S: Store>(store: &S, key: StorageKey) {
    let fp = fingerprint();
    let claim = store.claim(request(&key, &fp)).await.unwrap();
    assert!(matches!(claim, Claim::Completed(_)));
}

/// A completed key for replays.
async fn completed<S: Store>(store: &S) -> StorageKey {
    let key = unique_key();
    store_claim_complete(store, key).await;
    key
}

fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap()
}

fn text(s: String) -> Arc<str> {
    s.into()
}

/// The row of a PostgreSQL claim statement.
type PgClaimRow = (
    bool,
    String,
    Vec<u8>,
    i64,
    i64,
    i64,
    Option<i64>,
    Option<Vec<u8>>,
);

/// The row of a hand-written lookup.
type LookupRow = (String, Vec<u8>, Option<i32>, Option<Vec<u8>>);

/// The row of a MySQL/SQLite claim read.
type ReadRow = (String, Vec<u8>, i64, i64, i64, Option<i64>, Option<Vec<u8>>);

async fn postgres() {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let pool = match sqlx::postgres::PgPoolOptions::new()
        .max_connections(16)
        .connect(&url)
        .await
    {
        Ok(pool) => pool,
        Err(error) => {
            idempotency_test::unavailable::<()>("PostgreSQL", error);
            println!("| PostgreSQL | skipped: unreachable | | | | | | |");
            return;
        }
    };
    let suffix = &unique_key().to_hex()[..8];
    let tables = [
        format!("bench_store_{suffix}"),
        format!("bench_raw_{suffix}"),
    ];
    let store = Arc::new(
        PostgresStore::new(pool.clone())
            .with_table_name(&tables[0])
            .unwrap(),
    );
    let raw_store = PostgresStore::new(pool.clone())
        .with_table_name(&tables[1])
        .unwrap();
    store.migrate().await.unwrap();
    raw_store.migrate().await.unwrap();
    let raw_table = &tables[1];
    let claim = text(raw_store.statement("claim").unwrap().to_owned());
    let complete = text(raw_store.statement("complete").unwrap().to_owned());
    let insert = text(format!(
        "INSERT INTO {raw_table} (key_hash, namespace, fingerprint, state, token, attempts, \
         created_at, updated_at, expires_at) VALUES ($1, $2, $3, 'in_progress', \
         nextval('{raw_table}_token_seq'), 1, now(), now(), now() + $4 * interval '1 microsecond') \
         ON CONFLICT (key_hash) DO NOTHING RETURNING token"
    ));
    let select = text(format!(
        "SELECT state, fingerprint, response_status, response_body FROM {raw_table} \
         WHERE key_hash = $1"
    ));
    let run = env_number("BENCH_RUN", 0);

    let identical = {
        let (pool, claim, complete) = (pool.clone(), claim.clone(), complete.clone());
        op(move |i| {
            let (pool, claim, complete) = (pool.clone(), claim.clone(), complete.clone());
            async move {
                let key = key(run + 1, i);
                let row: PgClaimRow = sqlx::query_as(&claim)
                    .bind(key.0.as_slice())
                    .bind("bench")
                    .bind(fingerprint().0.as_slice())
                    .bind(micros(LEASE))
                    .bind(claim_id())
                    // What wrote the record: none, as the store's `request` says.
                    .bind(None::<&str>)
                    .bind(None::<i16>)
                    .fetch_one(&pool)
                    .await
                    .unwrap();
                assert!(row.0);
                let outcome = outcome();
                let done = sqlx::query(&complete)
                    .bind(key.0.as_slice())
                    .bind(row.3)
                    .bind(i32::from(outcome.status))
                    .bind(outcome.body.as_ref())
                    .bind(micros(TTL))
                    .execute(&pool)
                    .await
                    .unwrap();
                assert_eq!(done.rows_affected(), 1);
            }
        })
    };
    let handwritten = {
        let (pool, insert, complete) = (pool.clone(), insert.clone(), complete.clone());
        op(move |i| {
            let (pool, insert, complete) = (pool.clone(), insert.clone(), complete.clone());
            async move {
                let key = key(run + 2, i);
                let (token,): (i64,) = sqlx::query_as(&insert)
                    .bind(key.0.as_slice())
                    .bind("bench")
                    .bind(fingerprint().0.as_slice())
                    .bind(micros(LEASE))
                    .fetch_one(&pool)
                    .await
                    .unwrap();
                let outcome = outcome();
                let done = sqlx::query(&complete)
                    .bind(key.0.as_slice())
                    .bind(token)
                    .bind(i32::from(outcome.status))
                    .bind(outcome.body.as_ref())
                    .bind(micros(TTL))
                    .execute(&pool)
                    .await
                    .unwrap();
                assert_eq!(done.rows_affected(), 1);
            }
        })
    };
    let store_op = {
        let store = Arc::clone(&store);
        op(move |i| {
            let store = Arc::clone(&store);
            async move { store_claim_complete(&*store, key(run, i)).await }
        })
    };
    run_case(Case {
        backend: "PostgreSQL",
        name: "claim+complete",
        store: store_op,
        baselines: vec![
            ("identical SQL", "2 vs 2", identical),
            ("hand-written", "2 vs 2", handwritten),
        ],
    })
    .await;

    let done_key = completed(&*store).await;
    let raw_key = completed(&raw_store).await;
    let identical = {
        let (pool, claim) = (pool.clone(), claim.clone());
        op(move |_| {
            let (pool, claim) = (pool.clone(), claim.clone());
            async move {
                let row: PgClaimRow = sqlx::query_as(&claim)
                    .bind(raw_key.0.as_slice())
                    .bind("bench")
                    .bind(fingerprint().0.as_slice())
                    .bind(micros(LEASE))
                    .bind(claim_id())
                    // What wrote the record: none, as the store's `request` says.
                    .bind(None::<&str>)
                    .bind(None::<i16>)
                    .fetch_one(&pool)
                    .await
                    .unwrap();
                assert!(!row.0 && row.1 == "completed");
            }
        })
    };
    let lookup = {
        let (pool, select) = (pool.clone(), select.clone());
        op(move |_| {
            let (pool, select) = (pool.clone(), select.clone());
            async move {
                let row: Option<LookupRow> = sqlx::query_as(&select)
                    .bind(raw_key.0.as_slice())
                    .fetch_optional(&pool)
                    .await
                    .unwrap();
                assert!(row.is_some_and(|row| row.0 == "completed"));
            }
        })
    };
    let store_op = {
        let store = Arc::clone(&store);
        op(move |_| {
            let store = Arc::clone(&store);
            async move { store_replay(&*store, done_key).await }
        })
    };
    run_case(Case {
        backend: "PostgreSQL",
        name: "replay",
        store: store_op,
        baselines: vec![
            ("identical SQL", "1 vs 1", identical),
            ("plain SELECT", "1 vs 1", lookup),
        ],
    })
    .await;
    for table in &tables {
        sqlx::raw_sql(&format!(
            "DROP TABLE IF EXISTS {table}; DROP SEQUENCE IF EXISTS {table}_token_seq; \
             DELETE FROM idempotency_schema WHERE table_name = '{table}'"
        ))
        .execute(&pool)
        .await
        .unwrap();
    }
}

async fn mysql() {
    let url = std::env::var("MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned());
    let pool = match sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(16)
        .connect(&url)
        .await
    {
        Ok(pool) => pool,
        Err(error) => {
            idempotency_test::unavailable::<()>("MySQL", error);
            println!("| MySQL | skipped: unreachable | | | | | | |");
            return;
        }
    };
    let suffix = &unique_key().to_hex()[..8];
    let tables = [
        format!("bench_store_{suffix}"),
        format!("bench_raw_{suffix}"),
    ];
    let store = Arc::new(
        MySqlStore::new(pool.clone())
            .with_table_name(&tables[0])
            .unwrap(),
    );
    let raw_store = MySqlStore::new(pool.clone())
        .with_table_name(&tables[1])
        .unwrap();
    store.migrate().await.unwrap();
    raw_store.migrate().await.unwrap();
    let raw_table = &tables[1];
    let upsert = text(raw_store.statement("upsert").unwrap().to_owned());
    let read = text(raw_store.statement("read").unwrap().to_owned());
    let complete = text(raw_store.statement("complete").unwrap().to_owned());
    let now = "UTC_TIMESTAMP(6)";
    let insert = text(format!(
        "INSERT IGNORE INTO {raw_table} (key_hash, namespace, fingerprint, state, token, attempts, \
         created_at, updated_at, expires_at) VALUES (?, ?, ?, 'in_progress', \
         LAST_INSERT_ID(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {now})), 1, {now}, \
         {now}, {now} + INTERVAL ? MICROSECOND)"
    ));
    let select = text(format!(
        "SELECT state, fingerprint, response_status, response_body FROM {raw_table} \
         WHERE key_hash = ?"
    ));
    let run = env_number("BENCH_RUN", 0);

    let identical = {
        let (pool, read, upsert, complete) =
            (pool.clone(), read.clone(), upsert.clone(), complete.clone());
        op(move |i| {
            let (pool, read, upsert, complete) =
                (pool.clone(), read.clone(), upsert.clone(), complete.clone());
            async move {
                let key = key(run + 1, i);
                let fp = fingerprint();
                let mut conn = pool.acquire().await.unwrap();
                let row: Option<ReadRow> = sqlx::query_as(&read)
                    .bind(key.0.as_slice())
                    .fetch_optional(&mut *conn)
                    .await
                    .unwrap();
                assert!(row.is_none());
                let claim_id = claim_id();
                let done = sqlx::query(&upsert)
                    .bind(key.0.as_slice())
                    .bind("bench")
                    .bind(fp.0.as_slice())
                    .bind(claim_id.clone())
                    .bind(micros(LEASE))
                    // What wrote the record: none, as the store's `request` says.
                    .bind(None::<&str>)
                    .bind(None::<i16>)
                    .bind("bench")
                    .bind(fp.0.as_slice())
                    .bind(claim_id)
                    .bind(None::<&str>)
                    .bind(None::<i16>)
                    .bind(micros(LEASE))
                    .execute(&mut *conn)
                    .await
                    .unwrap();
                drop(conn);
                let token = i64::try_from(done.last_insert_id()).unwrap();
                assert!(token > 0 && done.rows_affected() == 1);
                let outcome = outcome();
                let done = sqlx::query(&complete)
                    .bind(i32::from(outcome.status))
                    .bind(outcome.body.as_ref())
                    .bind(micros(TTL))
                    .bind(key.0.as_slice())
                    .bind(token)
                    .execute(&pool)
                    .await
                    .unwrap();
                assert_eq!(done.rows_affected(), 1);
            }
        })
    };
    let handwritten = {
        let (pool, insert, complete) = (pool.clone(), insert.clone(), complete.clone());
        op(move |i| {
            let (pool, insert, complete) = (pool.clone(), insert.clone(), complete.clone());
            async move {
                let key = key(run + 2, i);
                let done = sqlx::query(&insert)
                    .bind(key.0.as_slice())
                    .bind("bench")
                    .bind(fingerprint().0.as_slice())
                    .bind(micros(LEASE))
                    .execute(&pool)
                    .await
                    .unwrap();
                assert_eq!(done.rows_affected(), 1);
                let token = i64::try_from(done.last_insert_id()).unwrap();
                let outcome = outcome();
                let done = sqlx::query(&complete)
                    .bind(i32::from(outcome.status))
                    .bind(outcome.body.as_ref())
                    .bind(micros(TTL))
                    .bind(key.0.as_slice())
                    .bind(token)
                    .execute(&pool)
                    .await
                    .unwrap();
                assert_eq!(done.rows_affected(), 1);
            }
        })
    };
    let store_op = {
        let store = Arc::clone(&store);
        op(move |i| {
            let store = Arc::clone(&store);
            async move { store_claim_complete(&*store, key(run, i)).await }
        })
    };
    run_case(Case {
        backend: "MySQL",
        name: "claim+complete",
        store: store_op,
        baselines: vec![
            ("identical SQL", "3 vs 3", identical),
            ("hand-written", "3 vs 2", handwritten),
        ],
    })
    .await;

    let done_key = completed(&*store).await;
    let raw_key = completed(&raw_store).await;
    let identical = {
        let (pool, read) = (pool.clone(), read.clone());
        op(move |_| {
            let (pool, read) = (pool.clone(), read.clone());
            async move {
                let row: Option<ReadRow> = sqlx::query_as(&read)
                    .bind(raw_key.0.as_slice())
                    .fetch_optional(&pool)
                    .await
                    .unwrap();
                assert!(row.is_some_and(|row| row.0 == "completed" && row.4 > 0));
            }
        })
    };
    let handwritten = {
        let (pool, insert, select) = (pool.clone(), insert.clone(), select.clone());
        op(move |_| {
            let (pool, insert, select) = (pool.clone(), insert.clone(), select.clone());
            async move {
                let mut conn = pool.acquire().await.unwrap();
                let done = sqlx::query(&insert)
                    .bind(raw_key.0.as_slice())
                    .bind("bench")
                    .bind(fingerprint().0.as_slice())
                    .bind(micros(LEASE))
                    .execute(&mut *conn)
                    .await
                    .unwrap();
                assert_eq!(done.rows_affected(), 0, "a duplicate");
                let row: Option<LookupRow> = sqlx::query_as(&select)
                    .bind(raw_key.0.as_slice())
                    .fetch_optional(&mut *conn)
                    .await
                    .unwrap();
                assert!(row.is_some_and(|row| row.0 == "completed"));
            }
        })
    };
    let store_op = {
        let store = Arc::clone(&store);
        op(move |_| {
            let store = Arc::clone(&store);
            async move { store_replay(&*store, done_key).await }
        })
    };
    run_case(Case {
        backend: "MySQL",
        name: "replay",
        store: store_op,
        baselines: vec![
            ("identical SQL", "1 vs 1", identical),
            ("hand-written", "1 vs 2", handwritten),
        ],
    })
    .await;
    for table in &tables {
        sqlx::raw_sql(&format!(
            "DROP TABLE IF EXISTS {table}; \
             DELETE FROM idempotency_schema WHERE table_name = '{table}'"
        ))
        .execute(&pool)
        .await
        .unwrap();
    }
}

fn now_us() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros(),
    )
    .unwrap()
}

async fn sqlite() {
    let path = std::env::temp_dir().join(format!("bench_sql_{}.db", &unique_key().to_hex()[..8]));
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .synchronous(sqlx::sqlite::SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(30));
    let pool: SqlitePool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(16)
        .connect_with(options)
        .await
        .unwrap();
    let store = Arc::new(
        SqliteStore::new(pool.clone())
            .with_table_name("store_t")
            .unwrap(),
    );
    let raw_store = SqliteStore::new(pool.clone())
        .with_table_name("raw_t")
        .unwrap();
    store.migrate().await.unwrap();
    raw_store.migrate().await.unwrap();
    let read = text(raw_store.statement("read").unwrap().to_owned());
    let upsert = text(raw_store.statement("upsert").unwrap().to_owned());
    let complete = text(raw_store.statement("complete").unwrap().to_owned());
    let select = text(
        "SELECT state, fingerprint, response_status, response_body FROM raw_t WHERE key_hash = ?1"
            .to_owned(),
    );
    let insert = text(
        "INSERT INTO raw_t (key_hash, namespace, fingerprint, state, token, attempts, created_at, \
         updated_at, expires_at) VALUES (?1, ?2, ?3, 'in_progress', ?4, 1, ?4, ?4, ?4 + ?5) \
         ON CONFLICT (key_hash) DO NOTHING RETURNING token"
            .to_owned(),
    );
    let run = env_number("BENCH_RUN", 0);

    // Both baselines: a read, a claim statement returning the token, the completion.
    let three = |read: Arc<str>, claim: Arc<str>, offset: u64, with_now: bool| {
        let (pool, complete) = (pool.clone(), complete.clone());
        op(move |i| {
            let (pool, read, claim, complete) =
                (pool.clone(), read.clone(), claim.clone(), complete.clone());
            async move {
                let key = key(run + offset, i);
                let mut conn = pool.acquire().await.unwrap();
                let mut query = sqlx::query_as(&read).bind(key.0.as_slice());
                if with_now {
                    query = query.bind(now_us());
                }
                let row: Option<(String,)> = query.fetch_optional(&mut *conn).await.unwrap();
                assert!(row.is_none());
                let (token,): (i64,) = sqlx::query_as(&claim)
                    .bind(key.0.as_slice())
                    .bind("bench")
                    .bind(fingerprint().0.as_slice())
                    .bind(now_us())
                    .bind(micros(LEASE))
                    .fetch_one(&mut *conn)
                    .await
                    .unwrap();
                drop(conn);
                let outcome = outcome();
                let done = sqlx::query(&complete)
                    .bind(key.0.as_slice())
                    .bind(token)
                    .bind(i64::from(outcome.status))
                    .bind(outcome.body.as_ref())
                    .bind(now_us())
                    .bind(micros(TTL))
                    .execute(&pool)
                    .await
                    .unwrap();
                assert_eq!(done.rows_affected(), 1);
            }
        })
    };
    let identical = three(read.clone(), upsert.clone(), 1, true);
    let handwritten = three(select.clone(), insert.clone(), 2, false);
    let store_op = {
        let store = Arc::clone(&store);
        op(move |i| {
            let store = Arc::clone(&store);
            async move { store_claim_complete(&*store, key(run, i)).await }
        })
    };
    run_case(Case {
        backend: "SQLite (file, WAL)",
        name: "claim+complete",
        store: store_op,
        baselines: vec![
            ("identical SQL", "3 vs 3", identical),
            ("hand-written", "3 vs 3", handwritten),
        ],
    })
    .await;

    let done_key = completed(&*store).await;
    let raw_key = completed(&raw_store).await;
    let lookup = |sql: Arc<str>, with_now: bool| {
        let pool = pool.clone();
        op(move |_| {
            let (pool, sql) = (pool.clone(), sql.clone());
            async move {
                let mut query = sqlx::query_as(&sql).bind(raw_key.0.as_slice());
                if with_now {
                    query = query.bind(now_us());
                }
                let row: Option<(String,)> = query.fetch_optional(&pool).await.unwrap();
                assert!(row.is_some_and(|row| row.0 == "completed"));
            }
        })
    };
    let store_op = {
        let store = Arc::clone(&store);
        op(move |_| {
            let store = Arc::clone(&store);
            async move { store_replay(&*store, done_key).await }
        })
    };
    run_case(Case {
        backend: "SQLite (file, WAL)",
        name: "replay",
        store: store_op,
        baselines: vec![
            ("identical SQL", "1 vs 1", lookup(read.clone(), true)),
            ("plain SELECT", "1 vs 1", lookup(select.clone(), false)),
        ],
    })
    .await;
    pool.close().await;
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.clone().into_os_string();
        file.push(suffix);
        std::fs::remove_file(file).ok();
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        println!(
            "| backend | operation | baseline | statements (store vs baseline) | tasks | store ops/s | baseline ops/s | store/baseline |"
        );
        println!("|---|---|---|---|---|---|---|---|");
        // BENCH_ONLY=postgres|mysql|sqlite runs one backend.
        let only = std::env::var("BENCH_ONLY").unwrap_or_default();
        let wanted = |name: &str| only.is_empty() || only == name;
        if wanted("postgres") {
            postgres().await;
        }
        if wanted("mysql") {
            mysql().await;
        }
        if wanted("sqlite") {
            sqlite().await;
        }
    });
}
