//! Duplicate storms through the HTTP layer on every backend: by default 100 keys × 1000
//! concurrent duplicates (100 000 requests, tower `oneshot` in-process). Each key's duplicates
//! are released together behind a barrier, `STORM_WAVE` keys at a time. Exactly one execution
//! per key; every other answer is a replay (`Idempotent-Replayed: true`) or a 409; none is a
//! 5xx. The elapsed time per backend is printed (`--nocapture`), never asserted.
//!
//! Knobs: `STORM_KEYS` (100), `STORM_DUPLICATES` (1000), `STORM_WAVE` (10).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod hardening_support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::routing::post;
use hardening_support::*;
use idempotency_core::Store;
use idempotency_tower::IdempotencyLayer;
use tokio::sync::Barrier;
use tower::ServiceExt;

fn knob(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

type Executions = Arc<Mutex<HashMap<String, u32>>>;

async fn pay(State(executions): State<Executions>, headers: HeaderMap) -> (StatusCode, String) {
    let key = headers["idempotency-key"].to_str().unwrap().to_owned();
    *executions.lock().unwrap().entry(key).or_default() += 1;
    // A short handler, so that duplicates arrive both while it runs (409) and after (replay).
    tokio::time::sleep(Duration::from_millis(5)).await;
    (StatusCode::CREATED, "{\"paid\":true}".to_owned())
}

#[derive(Default, Debug)]
struct Tally {
    fresh: usize,
    replayed: usize,
    conflict: usize,
}

async fn storm<S: Store>(backend: &str, store: S) {
    let keys = knob("STORM_KEYS", 100);
    let duplicates = knob("STORM_DUPLICATES", 1000);
    let wave = knob("STORM_WAVE", 10).max(1);
    let executions: Executions = Arc::default();
    let layer = IdempotencyLayer::builder(store)
        .shared_scope()
        .namespace(unique("storm"))
        // Queueing for a pooled connection under 10 000 concurrent requests is not a store
        // failure: give each call room, so only a real fault would answer 503.
        .store_timeout(Duration::from_secs(30))
        .build();
    let app = Router::new()
        .route("/pay", post(pay))
        .with_state(executions.clone())
        .layer(layer);
    let run = unique("s");
    let started = Instant::now();
    let mut tallies: HashMap<String, Tally> = HashMap::new();
    let key_names: Vec<String> = (0..keys).map(|k| format!("{run}-{k}")).collect();
    for chunk in key_names.chunks(wave) {
        let barrier = Arc::new(Barrier::new(chunk.len() * duplicates));
        let mut tasks = Vec::with_capacity(chunk.len() * duplicates);
        for _ in 0..duplicates {
            for key in chunk {
                let app = app.clone();
                let key = key.clone();
                let barrier = barrier.clone();
                tasks.push(tokio::spawn(async move {
                    let request = Request::post("/pay")
                        .header("idempotency-key", key.as_str())
                        .header("content-type", "application/json")
                        .body(Body::from("{\"amount\":100}"))
                        .unwrap();
                    barrier.wait().await;
                    let response = app.oneshot(request).await.unwrap();
                    let replayed = response.headers().contains_key("idempotent-replayed");
                    (key, response.status(), replayed)
                }));
            }
        }
        for task in tasks {
            let (key, status, replayed) = task.await.unwrap();
            let tally = tallies.entry(key.clone()).or_default();
            match (status, replayed) {
                (StatusCode::CREATED, false) => tally.fresh += 1,
                (StatusCode::CREATED, true) => tally.replayed += 1,
                (StatusCode::CONFLICT, false) => tally.conflict += 1,
                other => panic!("{backend}: key {key} answered {other:?}"),
            }
        }
    }
    let elapsed = started.elapsed();
    let executions = executions.lock().unwrap();
    for key in &key_names {
        assert_eq!(executions.get(key), Some(&1), "{backend}: key {key}");
        let tally = &tallies[key];
        assert_eq!(tally.fresh, 1, "{backend}: key {key}: {tally:?}");
        assert_eq!(tally.fresh + tally.replayed + tally.conflict, duplicates);
    }
    let (replayed, conflict) = tallies
        .values()
        .fold((0, 0), |(r, c), t| (r + t.replayed, c + t.conflict));
    eprintln!(
        "storm {backend}: {keys} keys x {duplicates} duplicates ({} requests, waves of {wave} keys) \
         in {:.2} s: {keys} executions, {replayed} replays, {conflict} conflicts",
        keys * duplicates,
        elapsed.as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn storm_memory() {
    storm("memory", idempotency_core::MemoryStore::new()).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread")]
async fn storm_redis() {
    if !reachable("Redis", &redis_url()) {
        return;
    }
    // `RedisStore::connect` bounds each reply at 2 s on its one multiplexed connection; 10 000
    // calls queued behind each other on a loaded 2-core machine take longer than that (they
    // then fail as 503s). Queueing is not a fault here: a connection with a 30 s bound.
    use idempotency_redis::driver;
    let client = driver::Client::open(redis_url()).unwrap();
    let config = driver::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(30)));
    let connection = driver::aio::ConnectionManager::new_with_config(client, config)
        .await
        .unwrap();
    let store = idempotency_redis::RedisStore::new(connection)
        .with_key_prefix(format!("{}:", unique("storm")))
        .with_call_timeout(Duration::from_secs(30));
    storm("redis", store).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread")]
async fn storm_postgres() {
    let options = sqlx::postgres::PgPoolOptions::new()
        .max_connections(16)
        .acquire_timeout(Duration::from_secs(60));
    if let Some((store, drop_table)) = postgres_store(options, "storm").await {
        storm("postgres", store).await;
        drop_table().await;
    }
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread")]
async fn storm_mysql() {
    let options = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(16)
        .acquire_timeout(Duration::from_secs(60));
    if let Some((store, drop_table)) = mysql_store(options, "storm").await {
        storm("mysql", store).await;
        drop_table().await;
    }
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread")]
async fn storm_sqlite() {
    let options = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(60));
    let (store, remove) = sqlite_store(options, "storm_sqlite").await;
    storm("sqlite", store).await;
    remove().await;
}
