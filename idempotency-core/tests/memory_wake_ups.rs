//! Engines that share one memory store (an HTTP layer and a consumer in one process, say) wake
//! each other's waiters through the store: a duplicate waiting in engine B for a key engine A
//! runs is answered when A completes or releases it, not at its next read. Tokio's clock is
//! paused: it moves only when every task waits on a timer, so an answer that came from a read
//! on a timer (the poll, every 400 s here, or the in-flight answer's end, 5 s) shows as time
//! gone by, and one that came from the wake-up as none.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use idempotency_core::{
    Claim, ClaimId, ClaimRequest, CompleteRequest, Decision, Execution, FencingToken, Fingerprint,
    Idempotency, InFlightPolicy, MemoryStore, Namespace, Outcome, Scope, StorageKey, Store,
};
use idempotency_test::unique_key;
use tokio::sync::watch;
use tokio::task::JoinHandle;

type Shared = Arc<MemoryStore>;

/// The waiting engine's poll: its reads come at 1/32 of it, or at the in-flight answer's end
/// (5 s), unless it is woken.
const POLL: Duration = Duration::from_secs(400);

fn scope() -> Scope {
    Namespace::new("wake-ups").scope()
}

fn fingerprint() -> Fingerprint {
    Fingerprint::of_bytes(b"order 42")
}

/// Engines A (the owner: a lease far beyond the test) and B (the waiter) on one store.
fn engines() -> (Idempotency<Shared>, Idempotency<Shared>) {
    let store = Arc::new(MemoryStore::new());
    let a = Idempotency::new(Arc::clone(&store))
        .with_keep_alive(false, Duration::from_secs(600))
        .with_lease(Duration::from_secs(600));
    let b = Idempotency::new(store).with_in_flight_poll(POLL);
    (a, b)
}

/// A new key claimed in `owner`.
async fn claimed(owner: &Idempotency<Shared>) -> (StorageKey, Execution<Shared>) {
    idempotency_test::executing(owner, &scope(), &fingerprint()).await
}

/// A duplicate of `key` waiting in `engine` (up to a minute), once it waits.
async fn waiting(engine: &Idempotency<Shared>, key: StorageKey) -> JoinHandle<Decision<Shared>> {
    let waiter = engine.clone();
    let duplicate = tokio::spawn(async move {
        let wait = InFlightPolicy::wait(Duration::from_secs(60));
        waiter
            .claim(&scope(), key, &fingerprint(), wait)
            .await
            .unwrap()
    });
    while engine.in_flight_waiters() == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    duplicate
}

/// The duplicate's answer, which must come before any timer of the waiting engine fires.
async fn answer(duplicate: JoinHandle<Decision<Shared>>) -> Decision<Shared> {
    let woken = tokio::time::Instant::now();
    let decision = duplicate.await.unwrap();
    assert_eq!(
        woken.elapsed(),
        Duration::ZERO,
        "answered by a read on a timer, not by the store's wake-up"
    );
    decision
}

#[tokio::test(start_paused = true)]
async fn a_waiter_in_another_engine_gets_the_outcome_when_the_owner_completes() {
    let (a, b) = engines();
    let (key, execution) = claimed(&a).await;
    let duplicate = waiting(&b, key).await;
    execution.complete(Outcome::new(201, "paid")).await.unwrap();
    match answer(duplicate).await {
        Decision::Replay(outcome) => {
            assert_eq!(outcome.status, 201);
            assert_eq!(&outcome.body[..], b"paid");
        }
        other => panic!("the owner's outcome, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_release_wakes_the_waiters_in_another_engine_and_one_claims() {
    let (a, b) = engines();
    let (key, execution) = claimed(&a).await;
    let duplicate = waiting(&b, key).await;
    execution.release().await.unwrap();
    match answer(duplicate).await {
        Decision::Execute(execution) => {
            execution.complete(Outcome::new(201, "paid")).await.unwrap();
        }
        other => panic!("the waiter claims a released key, got {other:?}"),
    }
}

/// The fencing token of a new claim of `key` in `store`, for `lease`.
async fn lease_of(store: &MemoryStore, key: StorageKey, lease: Duration) -> FencingToken {
    let request = ClaimRequest {
        key: &key,
        namespace: "wake-ups",
        fingerprint: &fingerprint(),
        lease,
        claim_id: ClaimId::random(),
        mechanism: None,
        key_derivation: None,
    };
    match store.claim(request).await.unwrap() {
        Claim::Acquired(lease) => lease.token,
        other => panic!("a new key is claimed, got {other:?}"),
    }
}

/// What a receiver was told: `Some(true)` a landing, `Some(false)` nothing (its channel open),
/// `None` nothing, and nothing ever will be (its channel closed). The clock is paused: the
/// bound costs no time.
async fn told(receiver: &mut watch::Receiver<()>) -> Option<bool> {
    match tokio::time::timeout(Duration::from_secs(1), receiver.changed()).await {
        Ok(Ok(())) => Some(true),
        Ok(Err(_)) => None,
        Err(_) => Some(false),
    }
}

/// The store's side: every receiver of a key is told when its record lands, whichever way
/// (completed, released, deleted by an operator, evicted); a key with no record in flight has nothing to
/// wait for (a closed receiver: the waiters' read answers them).
#[tokio::test(start_paused = true)]
async fn the_store_tells_every_receiver_of_a_key_when_its_record_lands() {
    let store = MemoryStore::new();
    let claim = |key| lease_of(&store, key, Duration::from_secs(600));

    let key = unique_key();
    let token = claim(key).await;
    let (mut first, mut second) = (
        store.wake_ups(&key).await.unwrap(),
        store.wake_ups(&key).await.unwrap(),
    );
    assert_eq!(told(&mut first).await, Some(false), "nothing landed yet");
    let outcome = Outcome::new(201, "paid");
    let ttl = Duration::from_secs(600);
    let completed = CompleteRequest {
        key: &key,
        token,
        outcome: &outcome,
        ttl,
    };
    store.complete(completed).await.unwrap();
    assert_eq!(told(&mut first).await, Some(true), "completed");
    assert_eq!(told(&mut second).await, Some(true), "completed");
    let mut late = store.wake_ups(&key).await.unwrap();
    assert_eq!(
        told(&mut late).await,
        None,
        "a completed key: nothing to wait for"
    );

    let key = unique_key();
    let token = claim(key).await;
    let mut receiver = store.wake_ups(&key).await.unwrap();
    store.release(&key, token).await.unwrap();
    assert_eq!(told(&mut receiver).await, Some(true), "released");

    let key = unique_key();
    let token = claim(key).await;
    let mut receiver = store.wake_ups(&key).await.unwrap();
    assert!(store.delete_fenced(&key, token));
    assert_eq!(told(&mut receiver).await, Some(true), "deleted");

    // A lease that ended at once, its record evicted for a new key's room.
    let full = MemoryStore::with_capacity(1);
    let key = unique_key();
    lease_of(&full, key, Duration::ZERO).await;
    let mut receiver = full.wake_ups(&key).await.unwrap();
    lease_of(&full, unique_key(), Duration::from_secs(600)).await;
    assert_eq!(told(&mut receiver).await, Some(true), "evicted");

    let mut never = store.wake_ups(&unique_key()).await.unwrap();
    assert_eq!(
        told(&mut never).await,
        None,
        "a key never claimed: nothing to wait for"
    );
}
