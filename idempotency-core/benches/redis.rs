//! Redis store against a raw Redis client doing the same number of round trips, in one run.
//!
//! ```text
//! cargo bench -p idempotency-core --features redis --bench redis
//! ```
//!
//! - *claim+complete*: `RedisStore::claim` of a fresh key then `complete` (2 scripts) against
//!   raw `SET key v NX PX` then `SET key outcome PX` (2 commands).
//! - *replay*: `RedisStore::claim` of a completed key (1 script, outcome returned) against raw
//!   `GET` of a key holding the same outcome (1 command).
//!
//! Each pair runs at 1 and 64 concurrent tasks for `BENCH_SECONDS` (default 2) per round,
//! alternating store and raw for `BENCH_ROUNDS` rounds (default 3); the table shows the median
//! round. `REDIS_URL` defaults to `redis://127.0.0.1:6379`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use idempotency_core::redis::{ConnectionManager, RedisStore, connect, driver};
use idempotency_core::testing::unique_key;
use idempotency_core::{Claim, ClaimRequest, Fingerprint, Outcome, StorageKey, Store};

const LEASE: Duration = Duration::from_secs(60);
const TTL: Duration = Duration::from_secs(120);
const PREFIX: &str = "bench:redis:";

fn outcome() -> Outcome {
    Outcome::new(200, vec![b'x'; 256])
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
    Fut: std::future::Future<Output = ()> + Send,
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

fn request<'a>(key: &'a StorageKey, fingerprint: &'a Fingerprint) -> ClaimRequest<'a> {
    ClaimRequest {
        key,
        namespace: "bench",
        fingerprint,
        lease: LEASE,
    }
}

async fn store_claim_complete(store: Arc<RedisStore>, tasks: usize, seconds: Duration) -> f64 {
    let fingerprint = Fingerprint::of_bytes(b"bench");
    let outcome = outcome();
    throughput(tasks, seconds, move |_| {
        let (store, outcome) = (Arc::clone(&store), outcome.clone());
        async move {
            let key = unique_key();
            let Claim::Acquired(lease) = store.claim(request(&key, &fingerprint)).await.unwrap()
            else {
                panic!("fresh key");
            };
            store
                .complete(&key, lease.token, &outcome, TTL)
                .await
                .unwrap();
        }
    })
    .await
}

async fn raw_set_set(connection: ConnectionManager, tasks: usize, seconds: Duration) -> f64 {
    let body = outcome().body;
    throughput(tasks, seconds, move |_| {
        let (mut connection, body) = (connection.clone(), body.clone());
        async move {
            let key = format!("{PREFIX}raw:{{{}}}", unique_key().to_hex());
            let taken: Option<String> = driver::cmd("SET")
                .arg(&key)
                .arg("in-progress")
                .arg("NX")
                .arg("PX")
                .arg(LEASE.as_millis() as u64)
                .query_async(&mut connection)
                .await
                .unwrap();
            assert!(taken.is_some());
            let () = driver::cmd("SET")
                .arg(&key)
                .arg(&body[..])
                .arg("PX")
                .arg(TTL.as_millis() as u64)
                .query_async(&mut connection)
                .await
                .unwrap();
        }
    })
    .await
}

async fn store_replay(store: Arc<RedisStore>, tasks: usize, seconds: Duration) -> f64 {
    let fingerprint = Fingerprint::of_bytes(b"bench");
    let outcome = outcome();
    let keys: Arc<Vec<StorageKey>> = Arc::new((0..64).map(|_| unique_key()).collect());
    for key in keys.iter() {
        let Claim::Acquired(lease) = store.claim(request(key, &fingerprint)).await.unwrap() else {
            panic!("fresh key");
        };
        store
            .complete(key, lease.token, &outcome, TTL)
            .await
            .unwrap();
    }
    throughput(tasks, seconds, move |index| {
        let (store, keys) = (Arc::clone(&store), Arc::clone(&keys));
        async move {
            let key = keys[(index % 64) as usize];
            let claim = store.claim(request(&key, &fingerprint)).await.unwrap();
            assert!(matches!(claim, Claim::Completed(_)));
        }
    })
    .await
}

async fn raw_get(connection: ConnectionManager, tasks: usize, seconds: Duration) -> f64 {
    let keys: Arc<Vec<String>> = Arc::new(
        (0..64)
            .map(|_| format!("{PREFIX}raw:{{{}}}", unique_key().to_hex()))
            .collect(),
    );
    let mut setup = connection.clone();
    for key in keys.iter() {
        let () = driver::cmd("SET")
            .arg(key)
            .arg(&outcome().body[..])
            .arg("PX")
            .arg(TTL.as_millis() as u64)
            .query_async(&mut setup)
            .await
            .unwrap();
    }
    throughput(tasks, seconds, move |index| {
        let (mut connection, keys) = (connection.clone(), Arc::clone(&keys));
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
}

/// The floor scripting itself sets: `EVALSHA` of a script that only returns its one key's
/// value (`GET` inside Lua), one round trip like `GET`.
async fn raw_script_get(connection: ConnectionManager, tasks: usize, seconds: Duration) -> f64 {
    let key = format!("{PREFIX}raw:{{{}}}", unique_key().to_hex());
    let mut setup = connection.clone();
    let () = driver::cmd("SET")
        .arg(&key)
        .arg(&outcome().body[..])
        .arg("PX")
        .arg(TTL.as_millis() as u64)
        .query_async(&mut setup)
        .await
        .unwrap();
    let script = Arc::new(driver::Script::new("return redis.call('GET', KEYS[1])"));
    throughput(tasks, seconds, move |_| {
        let (mut connection, script, key) = (connection.clone(), Arc::clone(&script), key.clone());
        async move {
            let body: Option<Vec<u8>> = script
                .key(&key)
                .invoke_async(&mut connection)
                .await
                .unwrap();
            assert!(body.is_some());
        }
    })
    .await
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    // `cargo bench` passes `--bench`; under `cargo test --benches` this is a short smoke run.
    let benchmarking = std::env::args().any(|arg| arg == "--bench");
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let connection = match connect(&url).await {
        Ok(connection) => connection,
        Err(error) => {
            eprintln!("SKIPPED: Redis unreachable at {url}: {error}");
            return;
        }
    };
    let store = Arc::new(RedisStore::new(connection.clone()).with_key_prefix(PREFIX));
    let (seconds, rounds) = if benchmarking {
        (
            Duration::from_secs(env_number("BENCH_SECONDS", 2)),
            env_number("BENCH_ROUNDS", 3).max(1),
        )
    } else {
        (Duration::from_millis(50), 1)
    };

    println!("| operation | tasks | RedisStore ops/s | raw redis ops/s | ratio |");
    println!("|---|---:|---:|---:|---:|");
    for tasks in [1usize, 64] {
        let (mut store_runs, mut raw_runs) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            store_runs.push(store_claim_complete(Arc::clone(&store), tasks, seconds).await);
            raw_runs.push(raw_set_set(connection.clone(), tasks, seconds).await);
        }
        let (ours, raw) = (median(store_runs), median(raw_runs));
        println!(
            "| claim+complete (2 round trips) | {tasks} | {ours:.0} | {raw:.0} | {:.2} |",
            ours / raw
        );
        let (mut store_runs, mut raw_runs, mut script_runs) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            store_runs.push(store_replay(Arc::clone(&store), tasks, seconds).await);
            raw_runs.push(raw_get(connection.clone(), tasks, seconds).await);
            script_runs.push(raw_script_get(connection.clone(), tasks, seconds).await);
        }
        let (ours, raw, script) = (median(store_runs), median(raw_runs), median(script_runs));
        println!(
            "| replay (1 round trip) | {tasks} | {ours:.0} | {raw:.0} | {:.2} |",
            ours / raw
        );
        println!(
            "| *floor: raw `EVALSHA` of `return GET` vs raw `GET`* | {tasks} | {script:.0} | {raw:.0} | {:.2} |",
            script / raw
        );
    }
}
