//! The engine over the memory store: decisions, keep-alive, release on drop, waiting, timeouts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idempotency_core::{
    Claim, ClaimRequest, CompleteRequest, Decision, FencingToken, Fingerprint, Idempotency,
    IdempotencyKey, InFlightPolicy, Mechanism, MemoryStore, Outcome, Record, Scope, StorageKey,
    Store, StoreError, TouchRequest,
};

fn key(text: &str) -> IdempotencyKey {
    IdempotencyKey::parse(text).unwrap()
}

#[tokio::test]
async fn first_call_executes_duplicate_replays_other_payload_mismatches() {
    let engine = Idempotency::new(MemoryStore::new());
    let scope = Scope::new("engine");
    let fp = Fingerprint::of_bytes(b"a");

    let Decision::Execute(execution) = engine
        .claim(&scope, &key("k"), &fp, InFlightPolicy::Reject)
        .await
        .unwrap()
    else {
        panic!("first call must execute");
    };
    assert!(matches!(
        engine
            .claim(&scope, &key("k"), &fp, InFlightPolicy::Reject)
            .await
            .unwrap(),
        Decision::InFlight { .. }
    ));
    execution.complete(Outcome::new(201, "made")).await.unwrap();

    match engine
        .claim(&scope, &key("k"), &fp, InFlightPolicy::Reject)
        .await
        .unwrap()
    {
        Decision::Replay(outcome) => assert_eq!(outcome, Outcome::new(201, "made")),
        other => panic!("expected a replay, got {other:?}"),
    }
    assert!(matches!(
        engine
            .claim(
                &scope,
                &key("k"),
                &Fingerprint::of_bytes(b"b"),
                InFlightPolicy::Reject
            )
            .await
            .unwrap(),
        Decision::Mismatch
    ));
}

#[tokio::test]
async fn release_lets_the_retry_run_again() {
    let engine = Idempotency::new(MemoryStore::new());
    let scope = Scope::new("engine");
    let fp = Fingerprint::of_bytes(b"a");
    let Decision::Execute(execution) = engine
        .claim(&scope, &key("k"), &fp, InFlightPolicy::Reject)
        .await
        .unwrap()
    else {
        panic!("first call must execute");
    };
    execution.release().await.unwrap();
    assert!(matches!(
        engine
            .claim(&scope, &key("k"), &fp, InFlightPolicy::Reject)
            .await
            .unwrap(),
        Decision::Execute(_)
    ));
}

#[tokio::test]
async fn dropping_an_unfinished_execution_releases_the_key() {
    let engine = Idempotency::new(MemoryStore::new());
    let scope = Scope::new("engine");
    let fp = Fingerprint::of_bytes(b"a");
    let decision = engine
        .claim(&scope, &key("k"), &fp, InFlightPolicy::Reject)
        .await
        .unwrap();
    assert!(matches!(decision, Decision::Execute(_)));
    drop(decision);
    let storage_key = scope.storage_key(&key("k"));
    for _ in 0..100 {
        if engine.store().get(&storage_key).await.unwrap().is_none() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the dropped execution's key was not released");
}

#[tokio::test]
async fn keep_alive_protects_a_slow_execution_from_takeover() {
    // Renewed every third of the lease: 400 ms of slack for a loaded CI machine.
    let engine = Idempotency::new(MemoryStore::new()).with_lease(Duration::from_millis(600));
    let scope = Scope::new("engine");
    let fp = Fingerprint::of_bytes(b"a");
    let Decision::Execute(execution) = engine
        .claim(&scope, &key("slow"), &fp, InFlightPolicy::Reject)
        .await
        .unwrap()
    else {
        panic!("first call must execute");
    };
    // Four leases long: without renewal it would be taken over.
    tokio::time::sleep(Duration::from_millis(2400)).await;
    assert!(matches!(
        engine
            .claim(&scope, &key("slow"), &fp, InFlightPolicy::Reject)
            .await
            .unwrap(),
        Decision::InFlight { .. }
    ));
    execution.complete(Outcome::new(200, "slow")).await.unwrap();
}

#[tokio::test]
async fn without_keep_alive_a_stale_owner_is_fenced_off() {
    let engine = Idempotency::new(MemoryStore::new())
        .with_lease(Duration::from_millis(100))
        .with_keep_alive(false, Duration::ZERO);
    let scope = Scope::new("engine");
    let fp = Fingerprint::of_bytes(b"a");
    let Decision::Execute(stale) = engine
        .claim(&scope, &key("k"), &fp, InFlightPolicy::Reject)
        .await
        .unwrap()
    else {
        panic!("first call must execute");
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let Decision::Execute(fresh) = engine
        .claim(&scope, &key("k"), &fp, InFlightPolicy::Reject)
        .await
        .unwrap()
    else {
        panic!("an expired lease must be taken over");
    };
    assert!(fresh.lease().took_over);
    assert!(fresh.token() > stale.token());
    assert!(matches!(
        stale.complete(Outcome::new(200, "stale")).await,
        Err(StoreError::LeaseLost)
    ));
    fresh.complete(Outcome::new(200, "fresh")).await.unwrap();
    match engine
        .claim(&scope, &key("k"), &fp, InFlightPolicy::Reject)
        .await
        .unwrap()
    {
        Decision::Replay(outcome) => assert_eq!(outcome.body, "fresh"),
        other => panic!("expected the fresh outcome, got {other:?}"),
    }
}

#[tokio::test]
async fn waiting_mode_replays_the_first_outcome() {
    let engine = Idempotency::new(MemoryStore::new());
    let scope = Scope::new("engine");
    let fp = Fingerprint::of_bytes(b"a");
    let Decision::Execute(execution) = engine
        .claim(&scope, &key("k"), &fp, InFlightPolicy::Reject)
        .await
        .unwrap()
    else {
        panic!("first call must execute");
    };
    let waiter = {
        let (engine, scope) = (engine.clone(), scope.clone());
        tokio::spawn(async move {
            engine
                .claim(
                    &scope,
                    &key("k"),
                    &fp,
                    InFlightPolicy::wait(Duration::from_secs(5)),
                )
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    execution
        .complete(Outcome::new(200, "first"))
        .await
        .unwrap();
    match waiter.await.unwrap() {
        Decision::Replay(outcome) => assert_eq!(outcome.body, "first"),
        other => panic!("expected the waiter to replay, got {other:?}"),
    }
}

/// An owner that dies (another process: its claim is never completed, released nor renewed)
/// tells no one; its waiters read the record when its lease ends, not at their next poll, and
/// the first of them takes the key over.
#[tokio::test]
async fn waiters_of_an_owner_that_died_take_over_at_its_lease_end() {
    let store = Arc::new(MemoryStore::new());
    let scope = Scope::new("engine");
    let (k, fp) = (key("k"), Fingerprint::of_bytes(b"a"));
    let storage_key = scope.storage_key_for(Mechanism::Request, k.as_str());
    let dead = store
        .claim(ClaimRequest {
            key: &storage_key,
            namespace: scope.namespace(),
            fingerprint: &fp,
            lease: Duration::from_millis(200),
            claim_id: idempotency_core::ClaimId::random(),
            mechanism: Some(Mechanism::Request),
            key_derivation: None,
        })
        .await
        .unwrap();
    assert!(matches!(dead, Claim::Acquired(_)), "{dead:?}");
    // Polled from 10 s on (1/32 of 320 s), waiting at most 5 s: only a read at the lease's end
    // answers in time.
    let engine = Idempotency::new(Arc::clone(&store)).with_in_flight_poll(Duration::from_secs(320));
    let decision = engine
        .claim(
            &scope,
            &k,
            &fp,
            InFlightPolicy::wait(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    let Decision::Execute(execution) = decision else {
        panic!("the waiter takes the dead owner's key over: {decision:?}");
    };
    assert!(execution.lease().took_over);
}

#[tokio::test]
async fn waiting_is_bounded() {
    let engine = Idempotency::new(MemoryStore::new());
    let scope = Scope::new("engine");
    let fp = Fingerprint::of_bytes(b"a");
    let _running = engine
        .claim(&scope, &key("k"), &fp, InFlightPolicy::Reject)
        .await
        .unwrap();
    let decision = engine
        .claim(
            &scope,
            &key("k"),
            &fp,
            InFlightPolicy::wait(Duration::from_millis(100)),
        )
        .await
        .unwrap();
    assert!(matches!(decision, Decision::InFlight { .. }));
}

/// A store whose claims take `takes` and then fail with a time-out: at `bound`, if it says it
/// bounds its own calls ([`Store::call_bound`]); its other calls never answer (a hung server).
#[derive(Debug)]
struct SlowStore {
    takes: Duration,
    bound: Option<Duration>,
}

impl SlowStore {
    /// A store whose backend never answers, nor bounds its calls.
    fn hung() -> Self {
        Self {
            takes: Duration::from_secs(24 * 3600),
            bound: None,
        }
    }
}

impl Store for SlowStore {
    async fn claim(&self, _: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        tokio::time::sleep(self.takes).await;
        Err(StoreError::Timeout(self.bound.unwrap_or(self.takes)))
    }
    fn call_bound(&self) -> Option<Duration> {
        self.bound
    }
    async fn complete(&self, _: CompleteRequest<'_>) -> Result<(), StoreError> {
        std::future::pending().await
    }
    async fn release(&self, _: &StorageKey, _: FencingToken) -> Result<(), StoreError> {
        std::future::pending().await
    }
    async fn undo_claim(
        &self,
        _: &StorageKey,
        _: idempotency_core::ClaimId,
    ) -> Result<bool, StoreError> {
        std::future::pending().await
    }
    async fn touch(&self, _: TouchRequest<'_>) -> Result<(), StoreError> {
        std::future::pending().await
    }
    async fn get(&self, _: &StorageKey) -> Result<Option<Record>, StoreError> {
        std::future::pending().await
    }
    async fn purge_expired(&self, _: usize) -> Result<u64, StoreError> {
        std::future::pending().await
    }
}

#[tokio::test]
async fn a_hung_store_times_out() {
    let engine = Idempotency::new(SlowStore::hung()).with_store_timeout(Duration::from_millis(50));
    let result = engine
        .claim(
            &Scope::new("engine"),
            &key("k"),
            &Fingerprint::of_bytes(b"a"),
            InFlightPolicy::Reject,
        )
        .await;
    assert!(matches!(result, Err(StoreError::Timeout(_))));
}

/// The engine sets no timer of its own on a store that bounds its calls within the store
/// timeout, and keeps its timer for one whose bound is longer.
#[tokio::test]
async fn a_store_bound_within_the_store_timeout_replaces_the_engines_timer() {
    let claim = |store: SlowStore, store_timeout: Duration| async move {
        let engine = Idempotency::new(store).with_store_timeout(store_timeout);
        let (scope, key, fingerprint) =
            (Scope::new("engine"), key("k"), Fingerprint::of_bytes(b"a"));
        let begun = engine.claim(&scope, &key, &fingerprint, InFlightPolicy::Reject);
        tokio::time::timeout(Duration::from_secs(5), begun)
            .await
            .expect("every claim here ends within 5 s")
    };
    let ms = Duration::from_millis;
    // Bound 30 ms, within the engine's 60 ms: the store's answer, after its 150 ms (the
    // engine's timer would have ended the claim at 60 ms with its own time-out).
    let result = claim(
        SlowStore {
            takes: ms(150),
            bound: Some(ms(30)),
        },
        ms(60),
    )
    .await;
    assert!(
        matches!(result, Err(StoreError::Timeout(limit)) if limit == ms(30)),
        "{result:?}"
    );
    // Bound 60 s, past the engine's 30 ms: the engine's timer ends the claim.
    let long = Duration::from_secs(60);
    let result = claim(
        SlowStore {
            takes: long,
            bound: Some(long),
        },
        ms(30),
    )
    .await;
    assert!(
        matches!(result, Err(StoreError::Timeout(limit)) if limit == ms(30)),
        "{result:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_duplicates_execute_once() {
    // Every duplicate may wait (beyond the default bound of 128, they would be told at once).
    let engine = Idempotency::new(MemoryStore::new()).with_max_waiters_per_key(500);
    let executions = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..500)
        .map(|_| {
            let (engine, executions) = (engine.clone(), Arc::clone(&executions));
            tokio::spawn(async move {
                let scope = Scope::new("engine");
                let decision = engine
                    .claim(
                        &scope,
                        &key("once"),
                        &Fingerprint::of_bytes(b"a"),
                        InFlightPolicy::wait(Duration::from_secs(10)),
                    )
                    .await
                    .unwrap();
                match decision {
                    Decision::Execute(execution) => {
                        executions.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        execution.complete(Outcome::new(200, "once")).await.unwrap();
                        "once".to_owned()
                    }
                    Decision::Replay(outcome) => String::from_utf8(outcome.body.to_vec()).unwrap(),
                    other => panic!("unexpected {other:?}"),
                }
            })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap(), "once");
    }
    assert_eq!(executions.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn bounded_memory_store_refuses_rather_than_evicting_live_records() {
    let store = MemoryStore::with_capacity(64);
    let fp = Fingerprint::of_bytes(b"a");
    let mut refused = 0;
    for index in 0..10_000u32 {
        let key = Scope::new("cap").storage_key(&key(&format!("k{index}")));
        let request = ClaimRequest {
            key: &key,
            namespace: "cap",
            fingerprint: &fp,
            lease: Duration::from_secs(30),
            claim_id: idempotency_core::ClaimId::random(),
            mechanism: None,
            key_derivation: None,
        };
        match store.claim(request).await {
            Ok(Claim::Acquired(_)) => {}
            Err(StoreError::CapacityExceeded(64)) => refused += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(store.len() <= 64, "held {} records", store.len());
    assert_eq!(refused, 10_000 - store.len());

    // Expired records are evicted first.
    let short = MemoryStore::with_capacity(64);
    for index in 0..64u32 {
        let key = Scope::new("cap").storage_key(&key(&format!("s{index}")));
        let request = ClaimRequest {
            key: &key,
            namespace: "cap",
            fingerprint: &fp,
            lease: Duration::from_millis(20),
            claim_id: idempotency_core::ClaimId::random(),
            mechanism: None,
            key_derivation: None,
        };
        let _ = short.claim(request).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let held_before = short.len();
    for index in 0..held_before as u32 {
        let key = Scope::new("cap").storage_key(&key(&format!("fresh{index}")));
        let request = ClaimRequest {
            key: &key,
            namespace: "cap",
            fingerprint: &fp,
            lease: Duration::from_secs(30),
            claim_id: idempotency_core::ClaimId::random(),
            mechanism: None,
            key_derivation: None,
        };
        let _ = short.claim(request).await;
    }
    assert!(short.len() <= 64);
}

/// A foreign call's key is the same on every execution of a record (a release, then a retry)
/// and per step, differs between principals, is a valid key on the wire, and comes from the
/// previous key derivation's record while previous keys are read (the key a node of the previous
/// release sent).
#[tokio::test]
async fn downstream_keys_are_stable_per_record_and_step() {
    let engine = Idempotency::new(MemoryStore::new());
    let scope = Scope::for_mechanism(Mechanism::Function, "checkout").with_principal("shop-7");
    let fp = Fingerprint::of_bytes(b"order 42");
    let claim = || engine.claim(&scope, "T1", &fp, InFlightPolicy::Reject);
    let Decision::Execute(first) = claim().await.unwrap() else {
        panic!("a new key runs");
    };
    let capture = first.downstream_key("capture");
    assert_eq!(
        capture,
        scope
            .storage_key_for(Mechanism::Function, "T1")
            .downstream("capture")
    );
    assert_ne!(capture, first.downstream_key("grant"));
    assert!(IdempotencyKey::parse(&capture).is_ok(), "{capture}");
    first.release().await.unwrap();
    let Decision::Execute(retry) = claim().await.unwrap() else {
        panic!("a released key runs again");
    };
    assert_eq!(
        retry.downstream_key("capture"),
        capture,
        "stable across executions"
    );
    retry.release().await.unwrap();

    let other = Scope::for_mechanism(Mechanism::Function, "checkout").with_principal("shop-8");
    assert_ne!(
        other
            .storage_key_for(Mechanism::Function, "T1")
            .downstream("capture"),
        capture
    );

    let reading = Idempotency::new(MemoryStore::new()).with_previous_keys(true);
    let Decision::Execute(bridged) = reading
        .claim(&scope, "T1", &fp, InFlightPolicy::Reject)
        .await
        .unwrap()
    else {
        panic!("a new key runs");
    };
    assert_eq!(
        bridged.downstream_key("capture"),
        scope
            .storage_key_for(Mechanism::Request, "T1")
            .downstream("capture"),
        "the previous derivation keyed functions as requests"
    );
    bridged.release().await.unwrap();
}
