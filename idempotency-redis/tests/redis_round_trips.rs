//! Each store step costs exactly one round trip to Redis (two for the takeover of an ended
//! lease), counted by a proxy between the store and the real server (`REDIS_URL`) that parses
//! every command the client sends; duplicates waiting for one in-flight key cost what one does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use idempotency_core::{
    Claim, ClaimRequest, CompleteRequest, Decision, Fingerprint, Idempotency, InFlightPolicy,
    Lease, Namespace, Outcome, Scope, StorageKey, Store, TouchRequest,
};
use idempotency_redis::{RedisStore, RedisTokenStore, connect};
use idempotency_test::{unavailable, unique_key};
use idempotency_token::{TokenOutcome, TokenStore};

use idempotency_test::redis_commands::{Log, commands_of, counting_proxy, upstream};

fn request<'a>(key: &'a StorageKey, fingerprint: &'a Fingerprint) -> ClaimRequest<'a> {
    leased(key, fingerprint, Duration::from_secs(30))
}

fn leased<'a>(
    key: &'a StorageKey,
    fingerprint: &'a Fingerprint,
    lease: Duration,
) -> ClaimRequest<'a> {
    ClaimRequest {
        key,
        namespace: "round-trips",
        fingerprint,
        lease,
        claim_id: idempotency_core::ClaimId::random(),
        mechanism: None,
        key_derivation: None,
    }
}

/// Whether the server at `url` has `SET … IFEQ`.
async fn has_set_ifeq(url: &str) -> bool {
    let client = idempotency_redis::driver::Client::open(url).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let probe = format!("test:round-trips:ifeq:{}", unique_key().to_hex());
    let answer: Result<Option<String>, _> = idempotency_redis::driver::cmd("SET")
        .arg(&probe)
        .arg("v")
        .arg("IFEQ")
        .arg("other")
        .query_async(&mut connection)
        .await;
    answer.is_ok()
}

#[tokio::test]
async fn every_step_is_one_round_trip() {
    let redis = upstream("REDIS_URL", "redis://127.0.0.1:6379");
    every_step_on("Redis", redis, None).await;
}

/// On Valkey 8.1 (`VALKEY_URL`, default `redis://127.0.0.1:7379`; `.ci/valkey.sh` starts one),
/// `complete` and `touch` are the native `SET … IFEQ`.
#[tokio::test]
async fn on_valkey_complete_and_touch_are_one_native_set() {
    let valkey = upstream("VALKEY_URL", "redis://127.0.0.1:7379");
    every_step_on("Valkey", valkey, Some(true)).await;
}

/// Counts each step's commands on the server at `upstream`; `native`, if given, is whether
/// that server must have `SET … IFEQ`.
async fn every_step_on(service: &str, upstream: String, native: Option<bool>) {
    if let Err(error) = connect(&format!("redis://{upstream}")).await {
        unavailable::<()>(service, error);
        return;
    }
    let log: Log = Arc::default();
    let proxy = counting_proxy(upstream, Arc::clone(&log)).await;
    let url = format!("redis://{proxy}");
    let store = RedisStore::connect(&url)
        .await
        .unwrap()
        .with_key_prefix("test:round-trips:");
    let tokens =
        RedisTokenStore::new(store.connection().clone()).with_key_prefix("test:round-trips:token:");
    let fingerprint = Fingerprint::of_bytes(b"payload");
    let outcome = Outcome::new(200, "done");
    let ttl = Duration::from_secs(30);

    // Warm up: load every script once (the first EVALSHA of each answers NOSCRIPT). A claim
    // of a lease that ends within the clock margin runs the claim script.
    let short = Duration::from_millis(100);
    let ending = unique_key();
    store
        .claim(leased(&ending, &fingerprint, short))
        .await
        .unwrap();
    store.claim(request(&ending, &fingerprint)).await.unwrap();
    let warm = unique_key();
    let Claim::Acquired(lease) = store.claim(request(&warm, &fingerprint)).await.unwrap() else {
        panic!("warm-up claim");
    };
    store
        .touch(TouchRequest {
            key: &warm,
            token: lease.token,
            lease: ttl,
        })
        .await
        .unwrap();
    store.release(&warm, lease.token).await.unwrap();
    // Both completes: the native one, and the script (a claim left pending first), which a
    // server with `SET … IFEQ` has not run yet.
    for (warm, left_pending) in [(warm, false), (unique_key(), true)] {
        let Claim::Acquired(lease) = store.claim(request(&warm, &fingerprint)).await.unwrap()
        else {
            panic!("warm-up claim");
        };
        if left_pending {
            store.leave_pending(&warm, lease.token);
        }
        store
            .complete(CompleteRequest {
                key: &warm,
                token: lease.token,
                outcome: &outcome,
                ttl,
            })
            .await
            .unwrap();
    }
    let scope = Scope::new("round-trips");
    let warm_token = tokens.issue(&scope, ttl).await.unwrap();
    tokens.consume(&scope, &warm_token.value).await.unwrap();

    let key = unique_key();
    let (claim, sent) = commands_of(&log, store.claim(request(&key, &fingerprint))).await;
    let Claim::Acquired(lease) = claim.unwrap() else {
        panic!("claim of a fresh key acquires it");
    };
    assert_eq!(sent, ["SET"], "claim of a new key: one native SET NX GET");

    // Complete and touch are native where the server has `SET … IFEQ` (Valkey 8.1, Redis 8.4),
    // scripts elsewhere.
    let has_ifeq = has_set_ifeq(&url).await;
    if let Some(native) = native {
        assert_eq!(has_ifeq, native, "{service} has SET IFEQ");
    }
    let owned_step = if has_ifeq { "SET" } else { "EVALSHA" };

    let (touched, sent) = commands_of(
        &log,
        store.touch(TouchRequest {
            key: &key,
            token: lease.token,
            lease: ttl,
        }),
    )
    .await;
    touched.unwrap();
    assert_eq!(
        sent,
        [owned_step],
        "touch (SET IFEQ on this server: {has_ifeq})"
    );

    let (in_progress, sent) = commands_of(&log, store.claim(request(&key, &fingerprint))).await;
    assert!(matches!(in_progress.unwrap(), Claim::InProgress { .. }));
    assert_eq!(sent, ["SET"], "claim of a live lease");

    let (completed, sent) = commands_of(
        &log,
        store.complete(CompleteRequest {
            key: &key,
            token: lease.token,
            outcome: &outcome,
            ttl,
        }),
    )
    .await;
    completed.unwrap();
    // The native complete pipelines the wake-up the script publishes: one round trip.
    let complete: &[&str] = if has_ifeq {
        &["SET", "PUBLISH"]
    } else {
        &["EVALSHA"]
    };
    assert_eq!(
        sent, complete,
        "complete (SET IFEQ on this server: {has_ifeq})"
    );

    let (replay, sent) = commands_of(&log, store.claim(request(&key, &fingerprint))).await;
    assert_eq!(replay.unwrap(), Claim::Completed(outcome.clone()));
    assert_eq!(
        sent,
        ["GET"],
        "replay of a key this store completed: one GET"
    );

    // A claim left pending (two tiers) costs nothing more, and the store lets go of the record
    // it held for the native complete: completed later (a settle would), it takes the script.
    let pending = unique_key();
    let Claim::Acquired(left) = store.claim(request(&pending, &fingerprint)).await.unwrap() else {
        panic!("claim of a fresh key acquires it");
    };
    let (_, sent) = commands_of(&log, async {
        store.leave_pending(&pending, left.token);
    })
    .await;
    assert!(sent.is_empty(), "leaving a claim pending: {sent:?}");
    let (completed, sent) = commands_of(
        &log,
        store.complete(CompleteRequest {
            key: &pending,
            token: left.token,
            outcome: &outcome,
            ttl,
        }),
    )
    .await;
    completed.unwrap();
    assert_eq!(sent, ["EVALSHA"], "complete of a claim left pending");

    // Another store (another process) learns the key with its first replay, then reads it.
    let elsewhere =
        RedisStore::new(store.connection().clone()).with_key_prefix("test:round-trips:");
    for expected in ["SET", "GET"] {
        let (replay, sent) = commands_of(&log, elsewhere.claim(request(&key, &fingerprint))).await;
        assert_eq!(replay.unwrap(), Claim::Completed(outcome.clone()));
        assert_eq!(sent, [expected], "replay of a key completed elsewhere");
    }
    let (mismatch, sent) = commands_of(
        &log,
        store.claim(request(&key, &Fingerprint::of_bytes(b"other"))),
    )
    .await;
    assert_eq!(mismatch.unwrap(), Claim::Mismatch);
    assert_eq!(sent, ["GET"], "another payload under a completed key");

    let (record, sent) = commands_of(&log, store.get(&key)).await;
    assert_eq!(record.unwrap().unwrap().outcome, Some(outcome));
    assert_eq!(sent, ["MGET"], "get: the record and its checkpoints");

    // A fresh key that shares all but its last byte with the completed one (keys built by
    // hand, not digests) is still one SET: the store's memory of completed keys reads them
    // whole.
    let mut neighbour = key;
    neighbour.0[31] ^= 0xff;
    let (claim, sent) = commands_of(&log, store.claim(request(&neighbour, &fingerprint))).await;
    let Claim::Acquired(neighbour_lease) = claim.unwrap() else {
        panic!("a fresh key is acquired");
    };
    assert_eq!(sent, ["SET"], "claim of a fresh key like a completed one");
    store
        .release(&neighbour, neighbour_lease.token)
        .await
        .unwrap();

    // A key remembered completed whose record is gone is claimed anew, after the GET.
    let mut connection = store.connection().clone();
    let deleted: i64 = idempotency_redis::driver::cmd("DEL")
        .arg(store.record_key(&key))
        .query_async(&mut connection)
        .await
        .unwrap();
    assert_eq!(deleted, 1);
    let (claim, sent) = commands_of(&log, store.claim(request(&key, &fingerprint))).await;
    let Claim::Acquired(lease) = claim.unwrap() else {
        panic!("a deleted key is free");
    };
    assert_eq!(sent, ["GET", "SET"], "claim of a remembered key found gone");
    store.release(&key, lease.token).await.unwrap();

    let other = unique_key();
    let Claim::Acquired(lease) = store.claim(request(&other, &fingerprint)).await.unwrap() else {
        panic!("claim of a fresh key acquires it");
    };
    let (released, sent) = commands_of(&log, store.release(&other, lease.token)).await;
    released.unwrap();
    assert_eq!(sent, ["EVALSHA"], "release");

    // A crashed owner: its lease ends, and the claim that finds it asks the script, which
    // takes over with a greater token (the only step with a second round trip).
    let crashed = unique_key();
    let Claim::Acquired(first) = store
        .claim(leased(&crashed, &fingerprint, short))
        .await
        .unwrap()
    else {
        panic!("claim of a fresh key acquires it");
    };
    tokio::time::sleep(short * 3).await;
    let (takeover, sent) = commands_of(&log, store.claim(request(&crashed, &fingerprint))).await;
    let Claim::Acquired(second) = takeover.unwrap() else {
        panic!("an ended lease is taken over");
    };
    assert!(second.took_over && second.token > first.token);
    assert_eq!(sent, ["SET", "EVALSHA"], "takeover of an ended lease");

    // The taken-over record, written by the script, is read by the native claim: one trip.
    let (in_progress, sent) = commands_of(&log, store.claim(request(&crashed, &fingerprint))).await;
    assert!(matches!(in_progress.unwrap(), Claim::InProgress { .. }));
    assert_eq!(sent, ["SET"], "claim of a lease the script wrote");

    // A live lease ending within the clock margin: the script answers, by the server's TTL.
    let ending = unique_key();
    store
        .claim(leased(&ending, &fingerprint, Duration::from_millis(800)))
        .await
        .unwrap();
    let (in_progress, sent) = commands_of(&log, store.claim(request(&ending, &fingerprint))).await;
    match in_progress.unwrap() {
        // Unless this machine stalled for the whole lease, which would make it a takeover.
        Claim::InProgress { .. }
        | Claim::Acquired(Lease {
            took_over: true, ..
        }) => {}
        other => panic!("a lease near its end: {other:?}"),
    }
    assert_eq!(sent, ["SET", "EVALSHA"], "claim of a lease near its end");

    let (token, sent) = commands_of(&log, tokens.issue(&scope, ttl)).await;
    let token = token.unwrap();
    assert_eq!(sent, ["SET"], "token issue");
    let (consumed, sent) = commands_of(&log, tokens.consume(&scope, &token.value)).await;
    assert_eq!(consumed.unwrap(), TokenOutcome::Consumed);
    assert_eq!(sent, ["DEL"], "token consume");
}

/// Waits until `ready` holds (a condition the engine reports, not a guess at the time).
async fn until(ready: impl Fn() -> bool) {
    while !ready() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// A store through a counting proxy to `REDIS_URL`, and its log; `None` without Redis.
async fn counted_store() -> Option<(RedisStore, Log)> {
    let redis = upstream("REDIS_URL", "redis://127.0.0.1:6379");
    if let Err(error) = connect(&format!("redis://{redis}")).await {
        return unavailable("Redis", error);
    }
    let log: Log = Arc::default();
    let proxy = counting_proxy(redis, Arc::clone(&log)).await;
    let store = RedisStore::connect(&format!("redis://{proxy}"))
        .await
        .unwrap()
        .with_key_prefix("test:in-flight-waits:");
    Some((store, log))
}

/// One key claimed by `owner`, `waiters` duplicates waiting for it in `engine`, then the
/// owner's complete: every duplicate gets the owner's outcome. Returns the commands sent from
/// the first duplicate's claim to the last duplicate's answer (the `UNSUBSCRIBE` that follows
/// the answers aside).
async fn waiting_round(
    owner: &Idempotency<RedisStore>,
    engine: &Idempotency<RedisStore>,
    log: &Log,
    waiters: usize,
) -> Vec<String> {
    let namespace = Namespace::new("in-flight-waits").scope();
    let key = unique_key();
    let fingerprint = Fingerprint::of_bytes(b"order 42");
    let claim = owner.claim(&namespace, key, &fingerprint, InFlightPolicy::Reject);
    let Decision::Execute(execution) = claim.await.unwrap() else {
        panic!("a new key is claimed");
    };
    let before = log.lock().unwrap().len();
    let wait = InFlightPolicy::wait(Duration::from_secs(60));
    let mut duplicates = Vec::new();
    for n in 1..=waiters {
        let (waiter, namespace) = (engine.clone(), namespace.clone());
        duplicates.push(tokio::spawn(async move {
            waiter.claim(&namespace, key, &fingerprint, wait).await
        }));
        if n == 1 {
            // The first finds the key in flight in the store; the others, its wait.
            until(|| engine.in_flight_waiters() == 1).await;
        }
    }
    until(|| engine.in_flight_waiters() == waiters).await;
    // Subscribed to the key's wake-ups, then its record read once.
    until(|| {
        log.lock().unwrap()[before..]
            .iter()
            .any(|sent| sent == "MGET")
    })
    .await;
    execution.complete(Outcome::new(201, "paid")).await.unwrap();
    for duplicate in duplicates {
        match duplicate.await.unwrap().unwrap() {
            Decision::Replay(outcome) => assert_eq!(&outcome.body[..], b"paid"),
            other => panic!("a duplicate gets the owner's outcome, got {other:?}"),
        }
    }
    assert_eq!(engine.in_flight_waiters(), 0);
    let sent = log.lock().unwrap()[before..].to_vec();
    sent.into_iter()
        .filter(|sent| sent != "UNSUBSCRIBE")
        .collect()
}

/// Duplicates waiting in one process for a key its own engine runs share one wait, woken by
/// the owner's complete: fifty cost Redis exactly the commands one does (the first one's
/// claim, one subscription to the key's wake-ups and a read, the complete, one read).
#[tokio::test]
async fn fifty_duplicates_waiting_for_a_local_owner_cost_what_one_does() {
    let Some((store, log)) = counted_store().await else {
        return;
    };
    // No timed reads in this test: only the owner's complete wakes the wait.
    let engine = Idempotency::new(store)
        .with_keep_alive(false, Duration::from_secs(600))
        .with_in_flight_poll(Duration::from_secs(3600));
    waiting_round(&engine, &engine, &log, 1).await; // loads the scripts
    let one = waiting_round(&engine, &engine, &log, 1).await;
    let fifty = waiting_round(&engine, &engine, &log, 50).await;
    assert_eq!(one, ["SET", "SUBSCRIBE", "MGET", "EVALSHA", "MGET"]);
    assert_eq!(fifty, one);
}

/// Duplicates waiting for a key another process runs read its record once per tick between
/// them, never claim it again: fifty send the store the claim and the subscription one does
/// (only the number of reads depends on how long the owner takes).
#[tokio::test]
async fn fifty_duplicates_waiting_for_a_remote_owner_never_claim_again() {
    let Some((store, log)) = counted_store().await else {
        return;
    };
    let Some((owner_store, _)) = counted_store().await else {
        return;
    };
    let owner = Idempotency::new(owner_store).with_keep_alive(false, Duration::from_secs(600));
    let engine = Idempotency::new(store).with_in_flight_poll(Duration::from_millis(20));
    let writes = |sent: Vec<String>| -> Vec<String> {
        sent.into_iter()
            .filter(|command| command != "MGET")
            .collect()
    };
    waiting_round(&owner, &engine, &log, 1).await; // loads the scripts
    let one = writes(waiting_round(&owner, &engine, &log, 1).await);
    let fifty = writes(waiting_round(&owner, &engine, &log, 50).await);
    assert_eq!(
        one,
        ["SET", "SUBSCRIBE"],
        "the first duplicate's claim, one subscription"
    );
    assert_eq!(fifty, one);
}

/// Beyond the bound on waiters per key, a duplicate is answered in flight at once, with no
/// store command; those within it get the outcome.
#[tokio::test]
async fn duplicates_beyond_the_bound_are_answered_in_flight_at_once() {
    let Some((store, log)) = counted_store().await else {
        return;
    };
    let engine = Idempotency::new(store)
        .with_keep_alive(false, Duration::from_secs(600))
        .with_max_waiters_per_key(3);
    let namespace = Namespace::new("in-flight-waits").scope();
    let (key, fingerprint) = (unique_key(), Fingerprint::of_bytes(b"order 7"));
    let claim = engine.claim(&namespace, key, &fingerprint, InFlightPolicy::Reject);
    let Decision::Execute(execution) = claim.await.unwrap() else {
        panic!("a new key is claimed");
    };
    let wait = InFlightPolicy::wait(Duration::from_secs(600));
    let mut duplicates = Vec::new();
    for _ in 0..3 {
        let (engine, namespace) = (engine.clone(), namespace.clone());
        duplicates.push(tokio::spawn(async move {
            engine.claim(&namespace, key, &fingerprint, wait).await
        }));
    }
    until(|| engine.in_flight_waiters() == 3).await;
    let beyond = engine.claim(&namespace, key, &fingerprint, wait);
    // A guard against a hang only: the answer comes without waiting for the owner.
    let (answer, sent) =
        commands_of(&log, tokio::time::timeout(Duration::from_secs(60), beyond)).await;
    let answer = answer.expect("answered at once, not after a wait").unwrap();
    assert!(matches!(answer, Decision::InFlight { .. }), "{answer:?}");
    assert!(sent.is_empty(), "{sent:?}");
    execution.complete(Outcome::new(200, "done")).await.unwrap();
    for duplicate in duplicates {
        let decision = duplicate.await.unwrap().unwrap();
        assert!(matches!(decision, Decision::Replay(_)), "{decision:?}");
    }
}
