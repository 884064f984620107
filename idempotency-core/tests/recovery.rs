//! What the engine does after a store call failed at the wire: the claim whose answer never
//! came is undone, a failed complete or release is retried until it lands, and all of it is
//! background work a process can wait for. The store here is the memory store behind a switch
//! that makes its next calls fail after (or before) doing their work, the two ways a call
//! fails at the wire; the real links are failed by the fault harness
//! (`bench/harness/tests/faults_at_the_wire.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use idempotency_core::{
    Claim, ClaimId, ClaimRequest, CompleteRequest, Decision, FencingToken, Fingerprint,
    Idempotency, IdempotencyKey, InFlightPolicy, MemoryStore, Outcome, Record, RecordState, Scope,
    StorageKey, Store, StoreError, TouchRequest,
};

/// The memory store, whose next calls of one kind time out: `lost` of them after doing their
/// work (the answer lost), `unsent` of them before (the command lost).
#[derive(Default)]
struct Faulty {
    inner: MemoryStore,
    lost_claims: AtomicU32,
    lost_completes: AtomicU32,
    unsent_completes: AtomicU32,
    unsent_releases: AtomicU32,
}

fn take(counter: &AtomicU32) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

const TIMED_OUT: StoreError = StoreError::Timeout(Duration::from_millis(10));

impl Store for Faulty {
    async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        let claim = self.inner.claim(request).await;
        if take(&self.lost_claims) {
            return Err(TIMED_OUT);
        }
        claim
    }
    async fn complete(&self, request: CompleteRequest<'_>) -> Result<(), StoreError> {
        if take(&self.unsent_completes) {
            return Err(TIMED_OUT);
        }
        let done = self.inner.complete(request).await;
        if take(&self.lost_completes) {
            return Err(TIMED_OUT);
        }
        done
    }
    async fn release(&self, key: &StorageKey, token: FencingToken) -> Result<(), StoreError> {
        if take(&self.unsent_releases) {
            return Err(TIMED_OUT);
        }
        self.inner.release(key, token).await
    }
    async fn undo_claim(&self, key: &StorageKey, claim_id: ClaimId) -> Result<bool, StoreError> {
        self.inner.undo_claim(key, claim_id).await
    }
    async fn touch(&self, request: TouchRequest<'_>) -> Result<(), StoreError> {
        self.inner.touch(request).await
    }
    async fn get(&self, key: &StorageKey) -> Result<Option<Record>, StoreError> {
        self.inner.get(key).await
    }
    async fn purge_expired(&self, limit: usize) -> Result<u64, StoreError> {
        self.inner.purge_expired(limit).await
    }
}

struct Case {
    engine: Idempotency<Faulty>,
    scope: Scope,
    key: IdempotencyKey,
    fingerprint: Fingerprint,
}

impl Case {
    fn new(store: Faulty) -> Self {
        Self {
            engine: Idempotency::new(store),
            scope: Scope::new("recovery"),
            key: IdempotencyKey::parse(&format!("k-{}", ClaimId::random().as_bytes()[0])).unwrap(),
            fingerprint: Fingerprint::of_bytes(b"order"),
        }
    }

    async fn begin(&self) -> Result<Decision<Faulty>, StoreError> {
        self.engine
            .claim(
                &self.scope,
                &self.key,
                &self.fingerprint,
                InFlightPolicy::Reject,
            )
            .await
    }

    async fn record(&self) -> Option<Record> {
        let key = self.scope.storage_key(&self.key);
        self.engine.store().get(&key).await.unwrap()
    }

    async fn drained(&self) {
        assert!(
            self.engine
                .tracker()
                .shutdown(Duration::from_secs(10))
                .await
        );
    }
}

#[tokio::test]
async fn a_claim_whose_answer_was_lost_is_undone_and_the_retry_runs() {
    let case = Case::new(Faulty {
        lost_claims: AtomicU32::new(1),
        ..Faulty::default()
    });
    assert!(matches!(case.begin().await, Err(StoreError::Timeout(_))));
    case.drained().await;
    assert_eq!(case.record().await, None, "the orphan claim is gone");
    assert!(matches!(case.begin().await, Ok(Decision::Execute(_))));
}

#[tokio::test]
async fn a_complete_that_never_went_out_is_retried_until_it_lands() {
    let case = Case::new(Faulty {
        unsent_completes: AtomicU32::new(3),
        ..Faulty::default()
    });
    let Decision::Execute(execution) = case.begin().await.unwrap() else {
        panic!("a fresh key runs");
    };
    let outcome = Outcome::new(201, "made");
    assert!(matches!(
        execution.complete(outcome.clone()).await,
        Err(StoreError::Timeout(_))
    ));
    case.drained().await;
    assert_eq!(case.record().await.unwrap().state, RecordState::Completed);
    assert!(matches!(case.begin().await, Ok(Decision::Replay(replayed)) if replayed == outcome));
}

#[tokio::test]
async fn a_complete_whose_answer_was_lost_is_found_landed() {
    let case = Case::new(Faulty {
        lost_completes: AtomicU32::new(1),
        ..Faulty::default()
    });
    let Decision::Execute(execution) = case.begin().await.unwrap() else {
        panic!("a fresh key runs");
    };
    let outcome = Outcome::new(201, "made");
    assert!(execution.complete(outcome.clone()).await.is_err());
    case.drained().await;
    assert!(matches!(case.begin().await, Ok(Decision::Replay(replayed)) if replayed == outcome));
}

#[tokio::test]
async fn a_release_that_failed_is_retried_and_the_key_runs_again() {
    let case = Case::new(Faulty {
        unsent_releases: AtomicU32::new(2),
        ..Faulty::default()
    });
    let Decision::Execute(execution) = case.begin().await.unwrap() else {
        panic!("a fresh key runs");
    };
    assert!(execution.release().await.is_err());
    case.drained().await;
    assert_eq!(case.record().await, None, "released on a later attempt");
    assert!(matches!(case.begin().await, Ok(Decision::Execute(_))));
}

#[tokio::test]
async fn an_execution_dropped_unfinished_is_released_in_counted_work() {
    let case = Case::new(Faulty {
        unsent_releases: AtomicU32::new(1),
        ..Faulty::default()
    });
    let Decision::Execute(execution) = case.begin().await.unwrap() else {
        panic!("a fresh key runs");
    };
    drop(execution);
    case.drained().await;
    assert_eq!(case.record().await, None);
}
