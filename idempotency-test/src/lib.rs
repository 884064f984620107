//! Test support for the `idempotency` toolkit, as `tower-test` is for tower: the conformance
//! suite every [`Store`] and [`TokenStore`](idempotency_token::TokenStore) passes, unchanged, the fault proxy and span capture.
//!
//! A backend's test file needs one line per suite:
//!
//! ```text
//! idempotency_test::store_conformance_tests!(async { Some(MyStore::connect(url).await.unwrap()) });
//! idempotency_test::token_conformance_tests!(async { Some(MyTokenStore::new()) });
//! ```
//!
//! The factory is an `async` expression giving `Option<Store>`; `None` skips the suite (use
//! [`unavailable`] so that under `CI=true` an unreachable server fails instead). Every check uses
//! fresh random keys, so suites may run in parallel against one shared server.
//!
//! [`FaultProxy`] fails the link to a real server (latency, black hole, reset, refusal) for the
//! fault tests of every front end. [`SpanCapture`] keeps the spans and events a test emits.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod checkpoints;
mod conflicts;
mod fault_proxy;
mod macros;
mod model;
mod operations;
#[cfg(feature = "tls")]
pub mod pki;
mod redis_cluster;
pub mod redis_commands;
mod spans;
mod support;
mod tokens;

pub use checkpoints::checkpoints;
pub use conflicts::conflict_marks;
pub use fault_proxy::{FaultProxy, LinkFault};
pub use model::{Walk, model_walk};
pub use operations::{
    KeptAudit, SharedBuffer, claimed, completed, operations_suite, unique_namespace,
};
pub use redis_cluster::{redis_cluster, redis_cluster_nodes};
pub use spans::{CapturedSpan, SpanCapture, captured};
use support::{
    LONG, PAST_SHORT, SHORT, acquire, binary_outcome, complete, fingerprint, request, touch,
};
pub use support::{concurrently, executing, unavailable, unique_key};
pub use tokens::tokens;

use std::sync::Arc;
use std::time::Duration;

use idempotency_core::{
    Claim, ClaimId, ClaimRequest, FencingToken, Lease, Mechanism, Outcome, RecordState, Store,
    StoreError,
};

/// absent → in_progress → completed, with replay of the exact outcome.
pub async fn lifecycle<S: Store>(store: &S) {
    let key = unique_key();
    let fp = fingerprint("a");
    assert_eq!(store.get(&key).await.unwrap(), None);

    let lease = acquire(store, &key, &fp, LONG).await;
    assert_eq!(lease.attempt, 1);
    assert!(!lease.took_over);

    match store.claim(request(&key, &fp, LONG)).await.unwrap() {
        Claim::InProgress { lease_remaining } => assert!(lease_remaining <= LONG),
        other => panic!("expected in progress, got {other:?}"),
    }
    let record = store
        .get(&key)
        .await
        .unwrap()
        .expect("record while in progress");
    assert_eq!(record.state, RecordState::InProgress);
    assert_eq!(record.token, lease.token);
    assert_eq!(record.fingerprint, fp);
    assert_eq!(record.namespace, "conformance");
    assert_eq!(record.attempts, 1);
    assert_eq!(record.outcome, None);
    // The record says what wrote it.
    assert_eq!(
        (record.mechanism, record.key_derivation),
        (Some(Mechanism::Function), Some(2))
    );

    let outcome = binary_outcome();
    complete(store, &key, lease.token, &outcome, LONG)
        .await
        .unwrap();
    for _ in 0..2 {
        assert_eq!(
            store.claim(request(&key, &fp, LONG)).await.unwrap(),
            Claim::Completed(outcome.clone())
        );
    }
    let record = store
        .get(&key)
        .await
        .unwrap()
        .expect("record once completed");
    assert_eq!(record.state, RecordState::Completed);
    assert_eq!(record.outcome, Some(outcome));
    assert_eq!(
        (record.mechanism, record.key_derivation),
        (Some(Mechanism::Function), Some(2))
    );
    assert!(record.completed_at.is_some());
    assert!(record.expires_at > record.created_at);

    // A completed record cannot be completed or released again.
    let again = Outcome::new(200, "other");
    assert!(matches!(
        complete(store, &key, lease.token, &again, LONG).await,
        Err(StoreError::LeaseLost)
    ));
    assert!(matches!(
        store.release(&key, lease.token).await,
        Err(StoreError::LeaseLost)
    ));
}

/// [`Store::settle`] completes an in-progress claim of its fingerprint, whichever token holds it,
/// and leaves every other record (absent, of another fingerprint, completed) as it is.
pub async fn settle_pending_claims<S: Store>(store: &S) {
    let (key, fp) = (unique_key(), fingerprint("a"));
    let outcome = binary_outcome();
    assert!(!store.settle(&key, &fp, &outcome, LONG).await.unwrap());
    assert_eq!(store.get(&key).await.unwrap(), None);

    let lease = acquire(store, &key, &fp, LONG).await;
    let other = Outcome::new(200, "other");
    assert!(
        !store
            .settle(&key, &fingerprint("b"), &other, LONG)
            .await
            .unwrap()
    );
    let record = store.get(&key).await.unwrap().expect("the claim stays");
    assert_eq!(
        (record.state, record.token),
        (RecordState::InProgress, lease.token)
    );

    assert!(store.settle(&key, &fp, &outcome, LONG).await.unwrap());
    assert_eq!(
        store.claim(request(&key, &fp, LONG)).await.unwrap(),
        Claim::Completed(outcome.clone())
    );
    let record = store.get(&key).await.unwrap().expect("the record");
    assert_eq!(record.state, RecordState::Completed);
    assert_eq!(record.token, lease.token);
    assert_eq!(record.outcome, Some(outcome.clone()));
    // The owner's own complete comes too late; a second settle changes nothing.
    assert!(matches!(
        complete(store, &key, lease.token, &other, LONG).await,
        Err(StoreError::LeaseLost)
    ));
    assert!(!store.settle(&key, &fp, &other, LONG).await.unwrap());
    assert_eq!(
        store
            .get(&key)
            .await
            .unwrap()
            .and_then(|record| record.outcome),
        Some(outcome)
    );
}

/// The same key with another fingerprint is a mismatch, in progress and completed, and the
/// record is untouched.
pub async fn mismatch<S: Store>(store: &S) {
    let key = unique_key();
    let (a, b) = (fingerprint("a"), fingerprint("b"));
    let lease = acquire(store, &key, &a, LONG).await;
    assert_eq!(
        store.claim(request(&key, &b, LONG)).await.unwrap(),
        Claim::Mismatch
    );
    let outcome = Outcome::new(200, "done");
    complete(store, &key, lease.token, &outcome, LONG)
        .await
        .unwrap();
    assert_eq!(
        store.claim(request(&key, &b, LONG)).await.unwrap(),
        Claim::Mismatch
    );
    assert_eq!(
        store.claim(request(&key, &a, LONG)).await.unwrap(),
        Claim::Completed(outcome)
    );
    assert_eq!(store.get(&key).await.unwrap().unwrap().fingerprint, a);
}

/// An expired lease is taken over with a greater token; the stale owner is refused everywhere.
pub async fn takeover_and_fencing<S: Store>(store: &S) {
    let key = unique_key();
    let fp = fingerprint("a");
    let first = acquire(store, &key, &fp, SHORT).await;
    tokio::time::sleep(PAST_SHORT).await;

    let second = acquire(store, &key, &fp, LONG).await;
    assert!(second.took_over, "an expired lease is a takeover");
    assert_eq!(second.attempt, 2);
    assert!(second.token > first.token, "takeover token must be greater");

    let stale = Outcome::new(200, "stale");
    assert!(matches!(
        complete(store, &key, first.token, &stale, LONG).await,
        Err(StoreError::LeaseLost)
    ));
    assert!(matches!(
        touch(store, &key, first.token, LONG).await,
        Err(StoreError::LeaseLost)
    ));
    assert!(matches!(
        store.release(&key, first.token).await,
        Err(StoreError::LeaseLost)
    ));

    let fresh = Outcome::new(200, "fresh");
    complete(store, &key, second.token, &fresh, LONG)
        .await
        .unwrap();
    let record = store.get(&key).await.unwrap().unwrap();
    assert_eq!(record.outcome, Some(fresh));
    assert_eq!(record.attempts, 2);
}

/// An expired lease is taken over even with another fingerprint (the crashed attempt left
/// nothing to protect); the new fingerprint holds from then on.
pub async fn takeover_with_other_payload<S: Store>(store: &S) {
    let key = unique_key();
    let (a, b) = (fingerprint("a"), fingerprint("b"));
    acquire(store, &key, &a, SHORT).await;
    tokio::time::sleep(PAST_SHORT).await;
    // Taken over by a claimer that says nothing of what it is: the record says so too.
    let taken = store
        .claim(ClaimRequest {
            mechanism: None,
            key_derivation: None,
            ..request(&key, &b, LONG)
        })
        .await
        .unwrap();
    let Claim::Acquired(lease) = taken else {
        panic!("an expired lease is taken over: {taken:?}");
    };
    assert!(lease.took_over);
    let record = store.get(&key).await.unwrap().expect("record");
    assert_eq!((record.mechanism, record.key_derivation), (None, None));
    assert_eq!(
        store.claim(request(&key, &a, LONG)).await.unwrap(),
        Claim::Mismatch
    );
}

/// Keep-alive: a touched lease is not taken over.
pub async fn touch_extends_lease<S: Store>(store: &S) {
    let key = unique_key();
    let fp = fingerprint("a");
    let lease = acquire(store, &key, &fp, SHORT).await;
    tokio::time::sleep(SHORT / 2).await;
    let touched_at = std::time::SystemTime::now();
    touch(store, &key, lease.token, Duration::from_secs(5))
        .await
        .unwrap();
    // The record says so too: renewed now, its lease ending 5 s on (to the millisecond).
    let record = store.get(&key).await.unwrap().expect("record");
    let slack = Duration::from_millis(2);
    assert!(record.updated_at + slack >= touched_at, "{record:?}");
    assert!(
        record.expires_at + slack >= touched_at + Duration::from_secs(5),
        "{record:?}"
    );
    tokio::time::sleep(PAST_SHORT).await;
    match store.claim(request(&key, &fp, LONG)).await.unwrap() {
        Claim::InProgress { lease_remaining } => assert!(
            lease_remaining > Duration::from_secs(3),
            "{lease_remaining:?}"
        ),
        other => panic!("expected in progress, got {other:?}"),
    }
    complete(store, &key, lease.token, &Outcome::new(200, "ok"), LONG)
        .await
        .unwrap();
}

/// Release frees the key; a later owner's token is greater; the released owner stays refused.
pub async fn release_and_reclaim<S: Store>(store: &S) {
    let key = unique_key();
    let fp = fingerprint("a");
    let first = acquire(store, &key, &fp, LONG).await;
    assert!(matches!(
        store
            .release(
                &key,
                FencingToken::new(first.token.get().wrapping_add(1000))
            )
            .await,
        Err(StoreError::LeaseLost)
    ));
    assert!(
        store.get(&key).await.unwrap().is_some(),
        "a refused release changes nothing"
    );
    store.release(&key, first.token).await.unwrap();
    assert_eq!(store.get(&key).await.unwrap(), None);

    let second = acquire(store, &key, &fingerprint("b"), LONG).await;
    assert!(second.token > first.token, "tokens never go backwards");
    assert!(matches!(
        complete(store, &key, first.token, &Outcome::new(200, "x"), LONG).await,
        Err(StoreError::LeaseLost)
    ));
    complete(store, &key, second.token, &Outcome::new(200, "y"), LONG)
        .await
        .unwrap();
}

/// An undo deletes nothing but an in-progress claim under its own claim id: not another claim,
/// not a completed record, not an absent key. (That it deletes a claim whose answer never came
/// is shown end to end, through a fault proxy, by each store's fault tests.)
pub async fn undo_spares_other_claims<S: Store>(store: &S) {
    let key = unique_key();
    let fp = fingerprint("a");
    let undo = |claim_id| store.undo_claim(&key, claim_id);
    assert!(!undo(ClaimId::random()).await.unwrap(), "an absent key");
    let claim_id = ClaimId::random();
    let claimed = store
        .claim(ClaimRequest {
            claim_id,
            ..request(&key, &fp, LONG)
        })
        .await
        .unwrap();
    let Claim::Acquired(lease) = claimed else {
        panic!("a fresh key is acquired: {claimed:?}");
    };
    assert!(
        !undo(ClaimId::random()).await.unwrap(),
        "another claim's id"
    );
    let record = store.get(&key).await.unwrap().expect("the claim stays");
    assert_eq!(record.state, RecordState::InProgress);
    complete(store, &key, lease.token, &Outcome::new(200, "ok"), LONG)
        .await
        .unwrap();
    assert!(!undo(claim_id).await.unwrap(), "a completed record");
    let record = store.get(&key).await.unwrap().expect("the outcome stays");
    assert_eq!(record.state, RecordState::Completed);
}

/// Steps on a key that was never claimed are refused.
pub async fn unknown_key_is_refused<S: Store>(store: &S) {
    let key = unique_key();
    let token = FencingToken::new(1);
    assert!(matches!(
        complete(store, &key, token, &Outcome::new(200, "x"), LONG).await,
        Err(StoreError::LeaseLost)
    ));
    assert!(matches!(
        touch(store, &key, token, LONG).await,
        Err(StoreError::LeaseLost)
    ));
    assert!(matches!(
        store.release(&key, token).await,
        Err(StoreError::LeaseLost)
    ));
    assert_eq!(store.get(&key).await.unwrap(), None);
}

/// A purge keeps an abandoned lease for the store's grace (an hour by default): the next claim
/// still sees the crashed owner and reports the takeover.
pub async fn abandoned_lease_outlives_purge<S: Store>(store: &S) {
    let key = unique_key();
    let fp = fingerprint("a");
    let first = acquire(store, &key, &fp, SHORT).await;
    tokio::time::sleep(PAST_SHORT).await;
    store.purge_expired(1_000_000).await.unwrap();
    let record = store
        .get(&key)
        .await
        .unwrap()
        .expect("an abandoned lease is kept for its grace");
    assert_eq!(record.state, RecordState::InProgress);
    assert_eq!(record.token, first.token);
    let second = acquire(store, &key, &fp, LONG).await;
    assert!(second.took_over, "the crashed owner is still seen");
    assert_eq!(second.attempt, 2);
    assert!(second.token > first.token);
}

/// A completed record past its TTL is gone: the next claim is a fresh first attempt, and a
/// purge removes it.
pub async fn completed_expiry_and_purge<S: Store>(store: &S) {
    let key = unique_key();
    let fp = fingerprint("a");
    let lease = acquire(store, &key, &fp, LONG).await;
    complete(store, &key, lease.token, &Outcome::new(200, "old"), SHORT)
        .await
        .unwrap();
    tokio::time::sleep(PAST_SHORT).await;
    let next = acquire(store, &key, &fingerprint("other"), LONG).await;
    assert!(!next.took_over);
    assert_eq!(next.attempt, 1);
    assert!(next.token > lease.token);
    complete(store, &key, next.token, &Outcome::new(200, "new"), SHORT)
        .await
        .unwrap();

    tokio::time::sleep(PAST_SHORT).await;
    store.purge_expired(1_000_000).await.unwrap();
    assert_eq!(store.get(&key).await.unwrap(), None, "purged after its TTL");
}

/// Many keys at once stay independent.
pub async fn keys_are_independent<S: Store>(store: Arc<S>) {
    let tasks: Vec<_> = (0..50)
        .map(|index| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let key = unique_key();
                let fp = fingerprint("a");
                let lease = acquire(&*store, &key, &fp, LONG).await;
                let outcome = Outcome::new(200, format!("value {index}"));
                complete(&*store, &key, lease.token, &outcome, LONG)
                    .await
                    .unwrap();
                assert_eq!(
                    store.claim(request(&key, &fp, LONG)).await.unwrap(),
                    Claim::Completed(outcome)
                );
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

/// 1000 concurrent claims of one key: exactly one wins; after completion, 1000 more all replay.
pub async fn claim_storm<S: Store>(store: Arc<S>) {
    const CALLERS: usize = 1000;
    let key = unique_key();
    let fp = fingerprint("storm");
    let claims = concurrently(CALLERS, |_| {
        let store = Arc::clone(&store);
        async move { store.claim(request(&key, &fp, LONG)).await.unwrap() }
    })
    .await;
    let winners: Vec<Lease> = claims
        .iter()
        .filter_map(|claim| match claim {
            Claim::Acquired(lease) => Some(*lease),
            _ => None,
        })
        .collect();
    assert_eq!(
        winners.len(),
        1,
        "exactly one of {CALLERS} concurrent claims wins"
    );
    assert!(
        claims
            .iter()
            .all(|claim| matches!(claim, Claim::Acquired(_) | Claim::InProgress { .. })),
        "every loser sees the claim in progress"
    );

    let outcome = Outcome::new(200, "once");
    complete(&*store, &key, winners[0].token, &outcome, LONG)
        .await
        .unwrap();
    let replays = concurrently(CALLERS, |_| {
        let store = Arc::clone(&store);
        async move { store.claim(request(&key, &fp, LONG)).await.unwrap() }
    })
    .await;
    assert!(
        replays
            .iter()
            .all(|claim| *claim == Claim::Completed(outcome.clone()))
    );
}
