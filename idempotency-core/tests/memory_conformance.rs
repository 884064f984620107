//! The shared conformance suite against the memory store.

use idempotency_core::MemoryStore;

idempotency_test::store_conformance_tests!(async { Some(MemoryStore::new()) });
idempotency_test::checkpoint_conformance_tests!(async { Some(MemoryStore::new()) });

/// With its grace over, a purge removes an abandoned lease; the claim after it is a fresh first
/// attempt with a greater token.
#[tokio::test]
async fn abandoned_lease_is_purged_after_its_grace() {
    use idempotency_core::{Claim, ClaimRequest, Fingerprint, Store};
    use std::time::Duration;

    let store = MemoryStore::new().with_abandoned_grace(Duration::from_millis(100));
    let key = idempotency_test::unique_key();
    let fingerprint = Fingerprint::of_bytes(b"a");
    let request = |lease| ClaimRequest {
        key: &key,
        namespace: "grace",
        fingerprint: &fingerprint,
        lease,
        claim_id: idempotency_core::ClaimId::random(),
        mechanism: None,
        key_derivation: None,
    };
    let Claim::Acquired(first) = store
        .claim(request(Duration::from_millis(50)))
        .await
        .unwrap()
    else {
        panic!("a fresh key is acquired");
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(store.purge_expired(100).await.unwrap(), 1);
    assert_eq!(store.get(&key).await.unwrap(), None);
    let Claim::Acquired(next) = store.claim(request(Duration::from_secs(30))).await.unwrap() else {
        panic!("the purged key is free");
    };
    assert!(!next.took_over);
    assert_eq!(next.attempt, 1);
    assert!(next.token > first.token);
}
