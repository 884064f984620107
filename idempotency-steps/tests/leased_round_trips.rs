//! What a leased run costs Redis, command by command (a proxy counts what the client sends; a
//! script's own commands run inside Redis): one round trip to start a new run, one per step,
//! one to pause or complete; a resume, three (the claim, the takeover script, the read of its
//! checkpoints). `REDIS_URL`, default `redis://127.0.0.1:6379`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;

use idempotency_core::{Fingerprint, Outcome, StorageKey};
use idempotency_redis::{RedisStore, connect};
use idempotency_steps::Start;
use idempotency_steps::leased::{Run, Runner, Started};
use idempotency_test::redis_commands::{Log, commands_of, counting_proxy, upstream};
use idempotency_test::{unavailable, unique_key};

type Store = RedisStore;

/// Starts the run of `key` and expects to own it.
async fn owned(runner: &Runner<Store>, key: &StorageKey, fingerprint: &Fingerprint) -> Run<Store> {
    let start = Start::new(key, "round-trips", fingerprint, &b"input"[..]);
    match runner.start(start).await.unwrap() {
        Started::Run(run) => run,
        other => panic!("the run is this process's: {other:?}"),
    }
}

#[tokio::test]
async fn a_leased_run_costs_one_round_trip_per_step() {
    let upstream = upstream("REDIS_URL", "redis://127.0.0.1:6379");
    if let Err(error) = connect(&format!("redis://{upstream}")).await {
        unavailable::<()>("Redis", error);
        return;
    }
    let log: Log = Arc::default();
    let proxy = counting_proxy(upstream, Arc::clone(&log)).await;
    // No wake-up listener: only the run's own commands go through the proxy.
    let connection = connect(&format!("redis://{proxy}")).await.unwrap();
    let store = RedisStore::new(connection).with_key_prefix("test:steps:round-trips:");
    let runner = Runner::new(store);
    let fingerprint = Fingerprint::of_bytes(b"payload");
    let outcome = Outcome::new(200, "done");

    // Warm up: each script's first EVALSHA answers NOSCRIPT and loads it.
    let warm = unique_key();
    let mut run = owned(&runner, &warm, &fingerprint).await;
    run.foreign("reserve", async |_| Ok(1u32)).await.unwrap();
    run.pause().await;
    owned(&runner, &warm, &fingerprint)
        .await
        .complete(&outcome)
        .await
        .unwrap();

    let key = unique_key();
    let (run, sent) = commands_of(&log, owned(&runner, &key, &fingerprint)).await;
    assert_eq!(sent, ["SET"], "start of a new run: the claim's SET NX GET");
    let mut run = run;
    let (_, sent) = commands_of(&log, run.foreign("reserve", async |_| Ok(1u32))).await;
    assert_eq!(sent, ["EVALSHA"], "a step: its checkpoint, one script");
    let (_, sent) = commands_of(&log, run.pause()).await;
    assert_eq!(
        sent,
        ["EVALSHA"],
        "a pause: the last checkpoint with its lease ended"
    );

    let (run, sent) = commands_of(&log, owned(&runner, &key, &fingerprint)).await;
    assert_eq!(
        sent,
        ["SET", "EVALSHA", "MGET"],
        "a resume: the claim, the takeover script, the checkpoints read back"
    );
    let mut run = run;
    assert!(run.resumed());
    let (reserved, sent) = commands_of(&log, run.foreign("reserve", async |_| Ok(2u32))).await;
    assert_eq!(
        (reserved.unwrap(), sent.len()),
        (1, 0),
        "a step done before: nothing"
    );
    let (_, sent) = commands_of(&log, run.foreign("capture", async |_| Ok(3u32))).await;
    assert_eq!(sent, ["EVALSHA"]);
    let (done, sent) = commands_of(&log, run.complete(&outcome)).await;
    done.unwrap();
    assert_eq!(sent, ["EVALSHA"], "the answer: the complete script");
}
