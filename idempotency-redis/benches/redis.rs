//! Redis store against a raw Redis client doing the same number of round trips, in one run.
//!
//! ```text
//! cargo bench -p idempotency-redis --bench redis
//! ```
//!
//! - *claim+complete*: `RedisStore::claim` of a fresh key (one native `SET k record NX GET PX`)
//!   then `complete` (one script) against raw `SET k v NX PX` then `SET k outcome PX`.
//! - *claim+complete through the engine*: the same through `Idempotency` (`claim`, then the
//!   execution's `complete`: what the layer runs), against the same raw pair.
//! - *the store's own commands, raw*: a raw client sending the commands the store sends for a
//!   claim+complete (`SET NX GET`, then `SET … IFEQ` where the server has it, else the
//!   compare-and-set script), with values of the store's record sizes: the store against its
//!   own commands, as the SQL bench compares each store with its own SQL.
//! - *replay*: `RedisStore::claim` of a key the store completed (a `GET` of the record, outcome
//!   included, as for every key the store saw completed) against raw `GET` of a key holding the
//!   same outcome. The first replay by a store that never saw the key completed is the claim's
//!   native `SET … NX GET`: the reference row of that command below.
//! - Reference rows, not the store:
//!   - raw `SET NX` then a minimal compare-and-set script, against raw `SET NX` then `SET`: the
//!     least a fenced completion costs on Redis 7, which has no native compare-and-set; and
//!     the store's claim+complete against that fenced pair;
//!   - raw `SET k <in-progress record> NX GET PX` of a completed key, and raw `EVALSHA` of
//!     `return redis.call('GET', KEYS[1])`, each against the same `GET`: what the replay's
//!     command and what any script cost by themselves.
//!
//! The store runs over a connection of its own (`RedisStore::connect`, no timer per reply: the
//! store bounds each call), the raw client over `connect`'s (a timer per reply): one timer per
//! call on each side.
//!
//! Each pair runs at 1 and 64 concurrent tasks for `BENCH_SECONDS` (default 2) per round,
//! alternating store and raw for `BENCH_ROUNDS` rounds (default 5); the table shows the ratio
//! of each round to the raw round right after it (median and range: on a noisy machine, the
//! figure to read), and each side's best round (on a shared machine, interference only ever slows a round down: at 1 task a
//! round now and then drops to a fraction of its speed, whichever side it is), and the server's
//! CPU time per operation in that round (from `INFO cpu`, so it includes any other client of the
//! server) and this process's (the client side: the store or the raw client, the tokio runtime
//! and the bench's own loop; from `/proc/self/stat`, 10-ms ticks). `REDIS_URL` defaults to `redis://127.0.0.1:6379`;
//! `BENCH_TASKS` (default `1,64`) lists the numbers of tasks.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use idempotency_core::{
    Claim, ClaimRequest, CompleteRequest, Decision, Fingerprint, Idempotency, InFlightPolicy,
    Namespace, Outcome, StorageKey, Store,
};
use idempotency_redis::{ConnectionManager, RedisStore, connect, driver};
use idempotency_test::unique_key;

const LEASE: Duration = Duration::from_secs(60);
const TTL: Duration = Duration::from_secs(120);
const PREFIX: &str = "bench:redis:";
const NAMESPACE: &str = "bench";

fn outcome() -> Outcome {
    Outcome::new(200, vec![b'x'; 256])
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// One measured run: operations per second, and the server's and this process's CPU time
/// per operation.
#[derive(Clone, Copy)]
struct Run {
    ops_per_second: f64,
    server_micros_per_op: f64,
    client_micros_per_op: f64,
}

/// This process's CPU time so far (user + system), in seconds, from `/proc/self/stat` (clock
/// ticks of 1/100 s); 0 where that file does not exist.
fn client_cpu() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    let Some(end_of_name) = stat.rfind(')') else {
        return 0.0;
    };
    stat[end_of_name + 1..]
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|ticks| ticks.parse::<f64>().ok())
        .sum::<f64>()
        / 100.0
}

/// The indexes a run's operations were given: task `t` ran `t * 1e9 .. t * 1e9 + done[t]`.
struct Indexes(Vec<u64>);

impl Indexes {
    fn all(&self) -> impl Iterator<Item = u64> + '_ {
        self.0
            .iter()
            .enumerate()
            .flat_map(|(task, done)| (0..*done).map(move |i| task as u64 * 1_000_000_000 + i))
    }
}

/// A fresh key per operation, derived from the run's random salt and the operation's index so
/// that the keys a run wrote can be deleted after it (outside the measured time): a later run
/// must not pay for expiring them.
fn key_of(salt: &[u8; 24], index: u64) -> StorageKey {
    let mut key = [0u8; 32];
    key[..24].copy_from_slice(salt);
    key[24..].copy_from_slice(&index.to_be_bytes());
    StorageKey(key)
}

fn salt() -> [u8; 24] {
    let mut salt = [0u8; 24];
    salt.copy_from_slice(&unique_key().0[..24]);
    salt
}

/// Deletes the keys a run wrote (`UNLINK`, 1000 at a time).
async fn delete(connection: &ConnectionManager, keys: impl Iterator<Item = String>) {
    let mut connection = connection.clone();
    let keys: Vec<String> = keys.collect();
    for batch in keys.chunks(1000) {
        let _: i64 = driver::cmd("UNLINK")
            .arg(batch)
            .query_async(&mut connection)
            .await
            .unwrap();
    }
}

/// The server's CPU time so far (user + system), in seconds.
async fn server_cpu(connection: &ConnectionManager) -> f64 {
    let mut connection = connection.clone();
    let info: String = driver::cmd("INFO")
        .arg("cpu")
        .query_async(&mut connection)
        .await
        .unwrap();
    info.lines()
        .filter_map(|line| {
            let (name, value) = line.split_once(':')?;
            matches!(name, "used_cpu_user" | "used_cpu_sys").then(|| value.trim().parse::<f64>())
        })
        .map(Result::unwrap)
        .sum()
}

/// Runs `op` on `tasks` concurrent tasks for `seconds`.
async fn throughput<F, Fut>(
    connection: &ConnectionManager,
    tasks: usize,
    seconds: Duration,
    op: F,
) -> (Run, Indexes)
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let cpu_before = server_cpu(connection).await;
    let client_before = client_cpu();
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let (op, stop, done) = (Arc::clone(&op), Arc::clone(&stop), Arc::clone(&done));
            tokio::spawn(async move {
                let first = task as u64 * 1_000_000_000;
                let mut index = first;
                while !stop.load(Ordering::Relaxed) {
                    op(index).await;
                    index += 1;
                    done.fetch_add(1, Ordering::Relaxed);
                }
                index - first
            })
        })
        .collect();
    tokio::time::sleep(seconds).await;
    stop.store(true, Ordering::Relaxed);
    let mut indexes = Vec::with_capacity(tasks);
    for handle in handles {
        indexes.push(handle.await.unwrap());
    }
    let elapsed = start.elapsed().as_secs_f64();
    let client = client_cpu() - client_before;
    let cpu = server_cpu(connection).await - cpu_before;
    let ops = done.load(Ordering::Relaxed) as f64;
    let run = Run {
        ops_per_second: ops / elapsed,
        server_micros_per_op: cpu * 1e6 / ops.max(1.0),
        client_micros_per_op: client * 1e6 / ops.max(1.0),
    };
    (run, Indexes(indexes))
}

fn request<'a>(key: &'a StorageKey, fingerprint: &'a Fingerprint) -> ClaimRequest<'a> {
    ClaimRequest {
        key,
        namespace: NAMESPACE,
        fingerprint,
        lease: LEASE,
        claim_id: idempotency_core::ClaimId::random(),
        mechanism: None,
        key_derivation: None,
    }
}

fn raw_key(key: &StorageKey) -> String {
    format!("{PREFIX}raw:{{{}}}", key.to_hex())
}

/// 64 raw keys holding the outcome's body.
async fn raw_completed_keys(connection: &ConnectionManager) -> Arc<Vec<String>> {
    let keys: Vec<String> = (0..64).map(|_| raw_key(&unique_key())).collect();
    let mut setup = connection.clone();
    for key in &keys {
        let () = driver::cmd("SET")
            .arg(key)
            .arg(&outcome().body[..])
            .arg("PX")
            .arg(TTL.as_millis() as u64)
            .query_async(&mut setup)
            .await
            .unwrap();
    }
    Arc::new(keys)
}

async fn store_claim_complete(
    store: Arc<RedisStore>,
    connection: &ConnectionManager,
    tasks: usize,
    seconds: Duration,
) -> Run {
    let fingerprint = Fingerprint::of_bytes(b"bench");
    let outcome = outcome();
    let salt = salt();
    let cleanup = Arc::clone(&store);
    let (run, indexes) = throughput(connection, tasks, seconds, move |index| {
        let (store, outcome) = (Arc::clone(&store), outcome.clone());
        async move {
            let key = key_of(&salt, index);
            let Claim::Acquired(lease) = store.claim(request(&key, &fingerprint)).await.unwrap()
            else {
                panic!("fresh key");
            };
            store
                .complete(CompleteRequest {
                    key: &key,
                    token: lease.token,
                    outcome: &outcome,
                    ttl: TTL,
                })
                .await
                .unwrap();
        }
    })
    .await;
    let keys = indexes
        .all()
        .map(|index| cleanup.record_key(&key_of(&salt, index)));
    delete(connection, keys).await;
    run
}

/// [`store_claim_complete`] through the engine, as the layer runs it: `claim` (a prepared
/// namespace), then `complete` of the execution.
async fn engine_claim_complete(
    store: Arc<RedisStore>,
    connection: &ConnectionManager,
    tasks: usize,
    seconds: Duration,
) -> Run {
    let engine = Idempotency::new(Arc::clone(&store));
    let namespace = Arc::new(Namespace::new(NAMESPACE).scope());
    let fingerprint = Fingerprint::of_bytes(b"bench");
    let outcome = outcome();
    let salt = salt();
    let (run, indexes) = throughput(connection, tasks, seconds, move |index| {
        let (engine, outcome) = (engine.clone(), outcome.clone());
        let namespace = Arc::clone(&namespace);
        async move {
            let key = key_of(&salt, index);
            let decision = engine.claim(&namespace, key, &fingerprint, InFlightPolicy::Reject);
            let Decision::Execute(execution) = decision.await.unwrap() else {
                panic!("fresh key");
            };
            execution.complete(outcome).await.unwrap();
        }
    })
    .await;
    let keys = indexes
        .all()
        .map(|index| store.record_key(&key_of(&salt, index)));
    delete(connection, keys).await;
    run
}

/// Whether the server has `SET … IFEQ` (Valkey 8.1, Redis 8.4): older ones answer a syntax
/// error.
async fn has_ifeq(connection: &ConnectionManager) -> bool {
    let mut connection = connection.clone();
    let answer: Result<Option<String>, _> = driver::cmd("SET")
        .arg(format!("{PREFIX}ifeq-probe"))
        .arg("x")
        .arg("IFEQ")
        .arg("y")
        .query_async(&mut connection)
        .await;
    answer.is_ok()
}

/// What a raw client sends for a claim+complete.
#[derive(Clone, Copy)]
enum RawPair {
    /// `SET k token NX PX`, then `SET k outcome PX`.
    Plain,
    /// `SET k token NX PX`, then a minimal compare-and-set script: the least any fenced
    /// completion costs on a server without a native compare-and-set (Redis 7: `SET … IFEQ`
    /// came in 8.4).
    Fenced,
    /// The store's own commands, with values of the store's record sizes (no encoding, no
    /// bookkeeping): `SET k <in-progress record> NX GET PX`, then, with `ifeq`,
    /// `SET k <completed record> IFEQ <in-progress record> PX`, else the compare-and-set script
    /// with the same values. What the store's claim+complete costs on the wire and the server.
    StoreCommands { ifeq: bool },
}

/// A raw client's claim+complete of fresh keys (see [`RawPair`]).
async fn raw_claim_complete(
    connection: &ConnectionManager,
    tasks: usize,
    seconds: Duration,
    pair: RawPair,
) -> Run {
    let body: Arc<[u8]> = outcome().body.to_vec().into();
    // The store's record: an 81-byte header and the namespace, then the body once completed.
    let in_progress: Arc<[u8]> = vec![b'p'; 81 + NAMESPACE.len()].into();
    let completed: Arc<[u8]> = [&in_progress[..], &body[..]].concat().into();
    let shared = connection.clone();
    let salt = salt();
    let compare_and_set = Arc::new(driver::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then \
         return redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) end return false",
    ));
    let (run, indexes) = throughput(connection, tasks, seconds, move |index| {
        let mut connection = shared.clone();
        let (body, in_progress) = (Arc::clone(&body), Arc::clone(&in_progress));
        let completed = Arc::clone(&completed);
        let compare_and_set = Arc::clone(&compare_and_set);
        async move {
            let key = raw_key(&key_of(&salt, index));
            let token = index.to_be_bytes();
            let (claimed, value): (&[u8], &[u8]) = match pair {
                RawPair::StoreCommands { .. } => (&in_progress, &completed),
                RawPair::Plain | RawPair::Fenced => (&token, &body),
            };
            let mut claim = driver::cmd("SET");
            claim.arg(&key).arg(claimed).arg("NX");
            if let RawPair::StoreCommands { .. } = pair {
                claim.arg("GET");
            }
            let taken: driver::Value = claim
                .arg("PX")
                .arg(LEASE.as_millis() as u64)
                .query_async(&mut connection)
                .await
                .unwrap();
            match pair {
                RawPair::StoreCommands { .. } => assert_eq!(taken, driver::Value::Nil),
                RawPair::Plain | RawPair::Fenced => assert_eq!(taken, driver::Value::Okay),
            }
            let ttl = TTL.as_millis() as u64;
            let set: Option<String> = match pair {
                RawPair::Plain => driver::cmd("SET")
                    .arg(&key)
                    .arg(value)
                    .arg("PX")
                    .arg(ttl)
                    .query_async(&mut connection)
                    .await
                    .unwrap(),
                RawPair::StoreCommands { ifeq: true } => driver::cmd("SET")
                    .arg(&key)
                    .arg(value)
                    .arg("IFEQ")
                    .arg(claimed)
                    .arg("PX")
                    .arg(ttl)
                    .query_async(&mut connection)
                    .await
                    .unwrap(),
                RawPair::Fenced | RawPair::StoreCommands { ifeq: false } => compare_and_set
                    .key(&key)
                    .arg(claimed)
                    .arg(value)
                    .arg(ttl)
                    .invoke_async(&mut connection)
                    .await
                    .unwrap(),
            };
            assert!(set.is_some());
        }
    })
    .await;
    let keys = indexes.all().map(|index| raw_key(&key_of(&salt, index)));
    delete(connection, keys).await;
    run
}

async fn store_replay(
    store: Arc<RedisStore>,
    connection: &ConnectionManager,
    tasks: usize,
    seconds: Duration,
) -> Run {
    let fingerprint = Fingerprint::of_bytes(b"bench");
    let outcome = outcome();
    let keys: Arc<Vec<StorageKey>> = Arc::new((0..64).map(|_| unique_key()).collect());
    for key in keys.iter() {
        let Claim::Acquired(lease) = store.claim(request(key, &fingerprint)).await.unwrap() else {
            panic!("fresh key");
        };
        store
            .complete(CompleteRequest {
                key,
                token: lease.token,
                outcome: &outcome,
                ttl: TTL,
            })
            .await
            .unwrap();
    }
    throughput(connection, tasks, seconds, move |index| {
        let (store, keys) = (Arc::clone(&store), Arc::clone(&keys));
        async move {
            let key = keys[(index % 64) as usize];
            let claim = store.claim(request(&key, &fingerprint)).await.unwrap();
            assert!(matches!(claim, Claim::Completed(_)));
        }
    })
    .await
    .0
}

async fn raw_get(connection: &ConnectionManager, tasks: usize, seconds: Duration) -> Run {
    let keys = raw_completed_keys(connection).await;
    let shared = connection.clone();
    throughput(connection, tasks, seconds, move |index| {
        let (mut connection, keys) = (shared.clone(), Arc::clone(&keys));
        async move {
            let body: Option<Vec<u8>> = driver::cmd("GET")
                .arg(&keys[(index % 64) as usize])
                .query_async(&mut connection)
                .await
                .unwrap();
            assert!(body.is_some());
        }
    })
    .await
    .0
}

/// The replay's command by itself: `SET k <in-progress record> NX GET PX` of a completed key
/// (a record of the size the store sends), no store code around it.
async fn raw_set_nx_get(connection: &ConnectionManager, tasks: usize, seconds: Duration) -> Run {
    let keys = raw_completed_keys(connection).await;
    let record: Arc<Vec<u8>> = Arc::new(vec![b'p'; 81 + NAMESPACE.len()]);
    let shared = connection.clone();
    throughput(connection, tasks, seconds, move |index| {
        let (mut connection, keys, record) =
            (shared.clone(), Arc::clone(&keys), Arc::clone(&record));
        async move {
            let body: Option<Vec<u8>> = driver::cmd("SET")
                .arg(&keys[(index % 64) as usize])
                .arg(&record[..])
                .arg("NX")
                .arg("GET")
                .arg("PX")
                .arg((LEASE + Duration::from_secs(3600)).as_millis() as u64)
                .query_async(&mut connection)
                .await
                .unwrap();
            assert!(body.is_some());
        }
    })
    .await
    .0
}

/// The floor scripting itself sets: `EVALSHA` of a script that only returns its one key's
/// value (`GET` inside Lua), one round trip like `GET`.
async fn raw_script_get(connection: &ConnectionManager, tasks: usize, seconds: Duration) -> Run {
    let keys = raw_completed_keys(connection).await;
    let script = Arc::new(driver::Script::new("return redis.call('GET', KEYS[1])"));
    let shared = connection.clone();
    throughput(connection, tasks, seconds, move |index| {
        let (mut connection, script, keys) =
            (shared.clone(), Arc::clone(&script), Arc::clone(&keys));
        async move {
            let body: Option<Vec<u8>> = script
                .key(&keys[(index % 64) as usize])
                .invoke_async(&mut connection)
                .await
                .unwrap();
            assert!(body.is_some());
        }
    })
    .await
    .0
}

fn best(runs: &[Run]) -> Run {
    runs.iter()
        .copied()
        .max_by(|a, b| a.ops_per_second.total_cmp(&b.ops_per_second))
        .expect("at least one round")
}

/// The ratios of the rounds, ours to raw, each round's against the same round's (they ran one
/// after the other): their median, least and greatest.
fn round_ratios(ours: &[Run], raw: &[Run]) -> (f64, f64, f64) {
    let mut ratios: Vec<f64> = ours
        .iter()
        .zip(raw)
        .map(|(ours, raw)| ours.ops_per_second / raw.ops_per_second)
        .collect();
    ratios.sort_by(f64::total_cmp);
    (
        ratios[ratios.len() / 2],
        ratios[0],
        ratios[ratios.len() - 1],
    )
}

/// One table row: each side's best round, and the ratios round by round.
fn row(operation: &str, tasks: usize, ours: &[Run], raw: &[Run]) {
    let (best_ours, best_raw) = (best(ours), best(raw));
    let (median, least, greatest) = round_ratios(ours, raw);
    println!(
        "| {operation} | {tasks} | {:.0} | {:.0} | {:.2} | {median:.2} ({least:.2}–{greatest:.2}) | {:.1} / {:.1} | {:.1} / {:.1} |",
        best_ours.ops_per_second,
        best_raw.ops_per_second,
        best_ours.ops_per_second / best_raw.ops_per_second,
        best_ours.server_micros_per_op,
        best_raw.server_micros_per_op,
        best_ours.client_micros_per_op,
        best_raw.client_micros_per_op,
    );
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    // `cargo bench` passes `--bench`; under `cargo test --benches` this is a short smoke run.
    let benchmarking = std::env::args().any(|arg| arg == "--bench");
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let connection = match connect(&url).await {
        Ok(connection) => connection,
        Err(error) => {
            idempotency_test::unavailable::<()>(&format!("Redis at {url}"), error);
            return;
        }
    };
    // Each side as it is used: the store over a connection of its own (`RedisStore::connect`:
    // the store bounds each call, the connection sets no timer of its own), the raw client over
    // `connect`'s (a timer on each reply, as the `redis` crate sets one by default).
    let store = match RedisStore::connect(&url).await {
        Ok(store) => Arc::new(store.with_key_prefix(PREFIX)),
        Err(error) => {
            idempotency_test::unavailable::<()>(&format!("Redis at {url}"), error);
            return;
        }
    };
    let (seconds, rounds) = if benchmarking {
        (
            Duration::from_secs(env_number("BENCH_SECONDS", 2)),
            env_number("BENCH_ROUNDS", 5).max(1),
        )
    } else {
        (Duration::from_millis(50), 1)
    };
    let c = &connection;
    let ifeq = has_ifeq(c).await;

    println!(
        "| operation | tasks | RedisStore ops/s | raw redis ops/s | ratio | ratio by round: median (range) | server CPU µs/op (store / raw) | client CPU µs/op (store / raw) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let tasks_list = match std::env::var("BENCH_TASKS") {
        Ok(list) => list
            .split(',')
            .map(|tasks| {
                tasks
                    .trim()
                    .parse()
                    .expect("BENCH_TASKS: numbers, e.g. 1,64")
            })
            .collect(),
        Err(_) => vec![1usize, 64],
    };
    for tasks in tasks_list {
        let (mut store_runs, mut raw_runs, mut fenced_runs) = (Vec::new(), Vec::new(), Vec::new());
        let (mut engine_runs, mut same_commands_runs) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            store_runs.push(store_claim_complete(Arc::clone(&store), c, tasks, seconds).await);
            raw_runs.push(raw_claim_complete(c, tasks, seconds, RawPair::Plain).await);
            fenced_runs.push(raw_claim_complete(c, tasks, seconds, RawPair::Fenced).await);
            engine_runs.push(engine_claim_complete(Arc::clone(&store), c, tasks, seconds).await);
            let own = RawPair::StoreCommands { ifeq };
            same_commands_runs.push(raw_claim_complete(c, tasks, seconds, own).await);
        }
        let claim_complete = (store_runs, raw_runs, fenced_runs);
        let (mut store_runs, mut raw_runs) = (Vec::new(), Vec::new());
        let (mut native_runs, mut script_runs) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            store_runs.push(store_replay(Arc::clone(&store), c, tasks, seconds).await);
            raw_runs.push(raw_get(c, tasks, seconds).await);
            native_runs.push(raw_set_nx_get(c, tasks, seconds).await);
            script_runs.push(raw_script_get(c, tasks, seconds).await);
        }
        let get = &raw_runs;
        row(
            "claim+complete (2 round trips)",
            tasks,
            &claim_complete.0,
            &claim_complete.1,
        );
        row(
            "claim+complete through the engine",
            tasks,
            &engine_runs,
            &claim_complete.1,
        );
        row(
            "*reference: raw `SET NX` + compare-and-set script vs raw `SET NX` + `SET`*",
            tasks,
            &claim_complete.2,
            &claim_complete.1,
        );
        row(
            "*claim+complete vs raw `SET NX` + compare-and-set script*",
            tasks,
            &claim_complete.0,
            &claim_complete.2,
        );
        row(
            "*reference: the store's own commands, raw, vs raw `SET NX` + `SET`*",
            tasks,
            &same_commands_runs,
            &claim_complete.1,
        );
        row(
            "*claim+complete vs the store's own commands, raw*",
            tasks,
            &claim_complete.0,
            &same_commands_runs,
        );
        row("replay (1 round trip)", tasks, &store_runs, get);
        row(
            "*reference: raw `SET NX GET` of a completed key vs raw `GET`*",
            tasks,
            &native_runs,
            get,
        );
        row(
            "*reference: raw `EVALSHA` of `return GET` vs raw `GET`*",
            tasks,
            &script_runs,
            get,
        );
    }
}
