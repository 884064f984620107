//! The shared conformance suite against Valkey 8.1 or later (`VALKEY_URL`, default
//! `redis://127.0.0.1:7379`; `.ci/valkey.sh` starts one), where the Redis store completes a
//! lease it claimed with the native `SET … IFEQ` rather than a script.

use std::time::Duration;

use idempotency_core::{
    Claim, ClaimRequest, CompleteRequest, Fingerprint, Outcome, Store, StoreError, TouchRequest,
};
use idempotency_redis::RedisStore;
use idempotency_test::{unavailable, unique_key};

fn url() -> String {
    std::env::var("VALKEY_URL").unwrap_or_else(|_| "redis://127.0.0.1:7379".to_owned())
}

idempotency_test::store_conformance_tests!(store());
idempotency_test::checkpoint_conformance_tests!(store());

/// A renewal can reach the server and its answer never come back: a keep-alive dropped
/// mid-call when the work ends, or a time-out. The record then differs from the one the store
/// holds (its lease fields), and the native compare fails; the owner must still complete.
/// Simulated with a second store (its own held records) renewing the first one's lease.
#[tokio::test]
async fn a_lease_renewed_unbeknown_to_the_store_still_completes() {
    let (Some(owner), Some(other)) = (store().await, store().await) else {
        return;
    };
    let key = unique_key();
    let fingerprint = Fingerprint::of_bytes(b"renewed");
    let request = ClaimRequest {
        key: &key,
        namespace: "conformance",
        fingerprint: &fingerprint,
        lease: Duration::from_secs(30),
        claim_id: idempotency_core::ClaimId::random(),
        mechanism: None,
        key_derivation: None,
    };
    let Claim::Acquired(lease) = owner.claim(request).await.unwrap() else {
        panic!("a new key is acquired");
    };
    tokio::time::sleep(Duration::from_millis(5)).await;
    other
        .touch(TouchRequest {
            key: &key,
            token: lease.token,
            lease: Duration::from_secs(60),
        })
        .await
        .unwrap();
    let outcome = Outcome::new(200, "done");
    let ttl = Duration::from_secs(30);
    owner
        .complete(CompleteRequest {
            key: &key,
            token: lease.token,
            outcome: &outcome,
            ttl,
        })
        .await
        .unwrap();
    assert_eq!(
        owner.claim(request).await.unwrap(),
        Claim::Completed(outcome)
    );
    // A stale owner is still refused.
    let again = Outcome::new(200, "again");
    assert!(matches!(
        owner
            .complete(CompleteRequest {
                key: &key,
                token: lease.token,
                outcome: &again,
                ttl
            })
            .await,
        Err(StoreError::LeaseLost)
    ));
}

async fn store() -> Option<RedisStore> {
    match RedisStore::connect(&url()).await {
        Ok(store) => Some(store.with_key_prefix("test:conformance:")),
        Err(error) => unavailable("Valkey", error),
    }
}
