//! Duplicates waiting in one instance for a key another instance runs are woken by the store
//! (the complete and release scripts publish, the waiting store's listener hears it), not by
//! their poll: the tests poll every 400 s (the first read without wake-ups comes after 1/32 of
//! it, 12.5 s) and want their answer within 10 s. Two instances are two stores with their own
//! connections to one Redis (`REDIS_URL`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use idempotency_core::{
    Decision, Execution, Fingerprint, Idempotency, InFlightPolicy, Namespace, Outcome, Scope,
    StorageKey, Store,
};
use idempotency_redis::{RedisStore, connect, driver};
use idempotency_test::redis_commands::{Log, counting_proxy, upstream};
use idempotency_test::{FaultProxy, LinkFault, unavailable};
use tokio::task::JoinHandle;

/// Far beyond the answer's bound, and so is 1/32 of it: only a wake-up answers in time.
const POLL: Duration = Duration::from_secs(400);
/// How long a woken waiter may take to be answered, generous for a busy machine.
const ANSWERED_WITHIN: Duration = Duration::from_secs(10);
const PREFIX: &str = "test:wake-ups:";

/// `host:port` of Redis, or `None` (skipped, or failed under CI) if it is unreachable.
async fn redis() -> Option<String> {
    let redis = upstream("REDIS_URL", "redis://127.0.0.1:6379");
    match connect(&format!("redis://{redis}")).await {
        Ok(_) => Some(redis),
        Err(error) => unavailable("Redis", error),
    }
}

/// The instance that runs the key.
async fn owner(redis: &str) -> Idempotency<RedisStore> {
    let store = RedisStore::connect(&format!("redis://{redis}"))
        .await
        .unwrap();
    Idempotency::new(store.with_key_prefix(PREFIX)).with_keep_alive(false, Duration::from_secs(600))
}

/// A waiting instance whose every command goes through a counting proxy (logged in `log`).
async fn counted(redis: &str, log: &Log) -> Idempotency<RedisStore> {
    let proxy = counting_proxy(redis.to_owned(), Arc::clone(log)).await;
    let store = RedisStore::connect(&format!("redis://{proxy}"))
        .await
        .unwrap();
    Idempotency::new(store.with_key_prefix(PREFIX)).with_in_flight_poll(POLL)
}

/// A waiting instance polling every `poll`, whose commands go through a counting proxy; its
/// wake-up listener's go through a fault proxy first, returned.
async fn through(redis: &str, log: &Log, poll: Duration) -> (Idempotency<RedisStore>, FaultProxy) {
    let proxy = counting_proxy(redis.to_owned(), Arc::clone(log)).await;
    let connection = connect(&format!("redis://{proxy}")).await.unwrap();
    let listener = FaultProxy::start(&proxy).await.unwrap();
    let client = driver::Client::open(format!("redis://{}", listener.addr())).unwrap();
    let store = RedisStore::new(connection)
        .with_key_prefix(PREFIX)
        .with_call_timeout(ANSWERED_WITHIN)
        .with_wake_ups(&client);
    (Idempotency::new(store).with_in_flight_poll(poll), listener)
}

fn scope() -> Scope {
    Namespace::new("wake-ups").scope()
}

/// Claims a new key in `owner`.
async fn claimed(owner: &Idempotency<RedisStore>) -> (StorageKey, Execution<RedisStore>) {
    idempotency_test::executing(owner, &scope(), &fingerprint()).await
}

fn fingerprint() -> Fingerprint {
    Fingerprint::of_bytes(b"order 42")
}

/// A duplicate of `key` waiting in `engine` (up to a minute).
fn duplicate(
    engine: &Idempotency<RedisStore>,
    key: StorageKey,
) -> JoinHandle<Decision<RedisStore>> {
    let engine = engine.clone();
    tokio::spawn(async move {
        let wait = InFlightPolicy::wait(Duration::from_secs(60));
        engine
            .claim(&scope(), key, &fingerprint(), wait)
            .await
            .unwrap()
    })
}

/// Instances A and B, A running a new key and its duplicate waiting in B, whose commands go to
/// the returned log (from `since`): subscribed, then its record read once (still in flight), so
/// that from now on only a wake-up reads again.
async fn waiting_elsewhere(
    redis: &str,
) -> (
    Log,
    usize,
    [Idempotency<RedisStore>; 2],
    Execution<RedisStore>,
    JoinHandle<Decision<RedisStore>>,
) {
    let log = Log::default();
    let (a, b) = (owner(redis).await, counted(redis, &log).await);
    let (key, execution) = claimed(&a).await;
    let since = log.lock().unwrap().len();
    let waiting = duplicate(&b, key);
    until(|| sent(&log, since, "MGET") == 1).await;
    assert_eq!(sent(&log, since, "SUBSCRIBE"), 1);
    (log, since, [a, b], execution, waiting)
}

/// Waits until `ready` holds (a condition the engine or the proxy reports).
async fn until(ready: impl Fn() -> bool) {
    while !ready() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// How many of the commands logged since `since` are `name`.
fn sent(log: &Log, since: usize, name: &str) -> usize {
    log.lock().unwrap()[since..]
        .iter()
        .filter(|command| *command == name)
        .count()
}

/// The duplicate's answer, which must come well before the poll.
async fn answer(duplicate: JoinHandle<Decision<RedisStore>>) -> Decision<RedisStore> {
    tokio::time::timeout(ANSWERED_WITHIN, duplicate)
        .await
        .expect("answered by the wake-up, not the 30 s poll")
        .unwrap()
}

fn replayed(decision: Decision<RedisStore>) {
    match decision {
        Decision::Replay(outcome) => {
            assert_eq!(outcome.status, 201);
            assert_eq!(&outcome.body[..], b"paid");
        }
        other => panic!("the owner's outcome, got {other:?}"),
    }
}

/// One duplicate waits in B (subscribed, its record read once), then A completes.
#[tokio::test]
async fn a_waiter_elsewhere_gets_the_outcome_when_the_owner_completes() {
    let Some(redis) = redis().await else { return };
    let (log, since, _instances, execution, waiting) = waiting_elsewhere(&redis).await;
    execution.complete(Outcome::new(201, "paid")).await.unwrap();
    replayed(answer(waiting).await);
    assert_eq!(sent(&log, since, "MGET"), 2, "one read when woken");
    // The flight is over: its subscription goes.
    until(|| sent(&log, since, "UNSUBSCRIBE") == 1).await;
}

/// A release wakes the waiters elsewhere, and they claim the key: one of them runs it.
#[tokio::test]
async fn a_release_wakes_the_waiters_elsewhere_and_they_claim() {
    let Some(redis) = redis().await else { return };
    let (_, _, _instances, execution, waiting) = waiting_elsewhere(&redis).await;
    execution.release().await.unwrap();
    match answer(waiting).await {
        Decision::Execute(execution) => {
            execution.complete(Outcome::new(201, "paid")).await.unwrap();
        }
        other => panic!("the waiter claims a released key, got {other:?}"),
    }
}

/// An owner that dies publishes nothing: the waiters elsewhere read the record when its lease
/// ends, and one of them takes the key over.
#[tokio::test]
async fn the_waiters_of_an_owner_that_died_take_over_at_its_lease_end() {
    let Some(redis) = redis().await else { return };
    let log = Log::default();
    let a = owner(&redis).await.with_lease(Duration::from_millis(500));
    let b = counted(&redis, &log).await;
    let (key, execution) = claimed(&a).await;
    // Dies: never completes, releases nor renews.
    std::mem::forget(execution);
    let since = log.lock().unwrap().len();
    let waiting = duplicate(&b, key);
    match answer(waiting).await {
        Decision::Execute(execution) => {
            assert!(execution.lease().took_over);
            execution.complete(Outcome::new(201, "paid")).await.unwrap();
        }
        other => panic!("the waiter takes the dead owner's key over, got {other:?}"),
    }
    // Read once, then at the lease's end (once only, if the first read came after it).
    let reads = sent(&log, since, "MGET");
    assert!((1..=2).contains(&reads), "{reads} reads");
}

/// A claim left pending (a queue's first copy, whose work committed with its record of truth)
/// and settled from the truth's answer wakes the waiters elsewhere too: the settle script
/// publishes as the complete script does.
#[tokio::test]
async fn a_settle_wakes_the_waiters_elsewhere() {
    let Some(redis) = redis().await else { return };
    let log = Log::default();
    let (a, b) = (owner(&redis).await, counted(&redis, &log).await);
    let (key, execution) = claimed(&a).await;
    execution.leave_pending();
    let since = log.lock().unwrap().len();
    let waiting = duplicate(&b, key);
    until(|| sent(&log, since, "MGET") == 1).await;
    assert_eq!(sent(&log, since, "SUBSCRIBE"), 1);
    let outcome = Outcome::new(201, "paid");
    let ttl = Duration::from_secs(600);
    let fingerprint = fingerprint();
    let settled = a.store().settle(&key, &fingerprint, &outcome, ttl).await;
    assert!(settled.unwrap(), "the pending claim is settled");
    replayed(answer(waiting).await);
    assert_eq!(sent(&log, since, "MGET"), 2, "one read when woken");
}

/// An operator's fenced delete of a record in flight wakes the waiters elsewhere, and one of
/// them claims the key.
#[tokio::test]
async fn an_operators_delete_wakes_the_waiters_elsewhere() {
    use idempotency_operations::Operations;

    let Some(redis) = redis().await else { return };
    let (_, _, [a, _b], execution, waiting) = waiting_elsewhere(&redis).await;
    let key = *execution.key();
    let deleted = a.store().delete_fenced(&key, execution.token()).await;
    assert!(deleted.unwrap(), "the record was the one listed");
    match answer(waiting).await {
        Decision::Execute(execution) => {
            execution.complete(Outcome::new(201, "paid")).await.unwrap();
        }
        other => panic!("the waiter claims a deleted key, got {other:?}"),
    }
    drop(execution);
}

/// The owner completes after the waiter joined but before its subscription is live (its
/// `SUBSCRIBE` held on the listener's link until then): the message is missed, and the read
/// made once subscribed finds the outcome.
#[tokio::test]
async fn a_complete_before_the_subscription_is_found_by_the_read_after_it() {
    let Some(redis) = redis().await else { return };
    let log = Log::default();
    let a = owner(&redis).await;
    let (b, listener) = through(&redis, &log, POLL).await;
    // A first wait opens the listener's connection.
    let (warm, execution) = claimed(&a).await;
    let waiting = duplicate(&b, warm);
    until(|| b.in_flight_waiters() == 1).await;
    execution.complete(Outcome::new(201, "paid")).await.unwrap();
    replayed(answer(waiting).await);

    let (key, execution) = claimed(&a).await;
    listener.set(LinkFault::BlackHole);
    let since = log.lock().unwrap().len();
    let waiting = duplicate(&b, key);
    until(|| b.in_flight_waiters() == 1).await;
    execution.complete(Outcome::new(201, "paid")).await.unwrap();
    // No read yet: the reads wait for the subscription.
    assert_eq!(sent(&log, since, "MGET"), 0);
    listener.set(LinkFault::None);
    replayed(answer(waiting).await);
    assert_eq!(sent(&log, since, "SUBSCRIBE"), 1);
    assert_eq!(sent(&log, since, "MGET"), 1, "the read after subscribing");
}

/// The listener's connection is lost while a duplicate waits: its waiters poll again (from
/// 1/32 of the poll, here 30 s: about 1 s, doubling) instead of every 30 s as while
/// subscribed, and the duplicate gets the outcome.
#[tokio::test]
async fn a_lost_listener_falls_back_to_polling() {
    let Some(redis) = redis().await else { return };
    let log = Log::default();
    let a = owner(&redis).await;
    let (b, listener) = through(&redis, &log, Duration::from_secs(30)).await;
    let (key, execution) = claimed(&a).await;
    let since = log.lock().unwrap().len();
    let waiting = duplicate(&b, key);
    until(|| sent(&log, since, "MGET") == 1).await;
    assert_eq!(sent(&log, since, "SUBSCRIBE"), 1);
    // The server is gone for the listener: reset, and refused if it reconnects.
    listener.set(LinkFault::Refuse);
    // The loss is heard: the waiters read at once, and poll from then on.
    let heard = until(|| sent(&log, since, "MGET") == 2);
    tokio::time::timeout(ANSWERED_WITHIN, heard)
        .await
        .expect("the loss is heard, not left to the 30 s poll");
    execution.complete(Outcome::new(201, "paid")).await.unwrap();
    replayed(answer(waiting).await);
}

/// One round: `waiters` duplicates of one key waiting in B while A runs it. Returns the
/// commands B sent from the first duplicate's claim to the last answer (the `UNSUBSCRIBE` that
/// follows the answers aside).
async fn round(
    a: &Idempotency<RedisStore>,
    b: &Idempotency<RedisStore>,
    log: &Log,
    waiters: usize,
) -> Vec<String> {
    let (key, execution) = claimed(a).await;
    let since = log.lock().unwrap().len();
    let mut duplicates = vec![duplicate(b, key)];
    // The first finds the key in flight in the store; the others join its wait.
    until(|| b.in_flight_waiters() == 1).await;
    duplicates.extend((1..waiters).map(|_| duplicate(b, key)));
    until(|| b.in_flight_waiters() == waiters).await;
    until(|| sent(log, since, "MGET") == 1).await;
    execution.complete(Outcome::new(201, "paid")).await.unwrap();
    for waiting in duplicates {
        replayed(answer(waiting).await);
    }
    let commands = log.lock().unwrap()[since..].to_vec();
    commands
        .into_iter()
        .filter(|command| command != "UNSUBSCRIBE")
        .collect()
}

/// 30 or 300 duplicates waiting in B cost Redis the same commands: one claim, one
/// subscription, one read when subscribed and one when woken.
#[tokio::test]
async fn the_store_load_of_waiting_does_not_grow_with_the_waiters() {
    let Some(redis) = redis().await else { return };
    let log = Log::default();
    let a = owner(&redis).await;
    let b = counted(&redis, &log).await.with_max_waiters_per_key(1_000);
    round(&a, &b, &log, 1).await; // connects the listener
    let thirty = round(&a, &b, &log, 30).await;
    let three_hundred = round(&a, &b, &log, 300).await;
    assert_eq!(thirty, ["SET", "SUBSCRIBE", "MGET", "MGET"]);
    assert_eq!(three_hundred, thirty);
}
