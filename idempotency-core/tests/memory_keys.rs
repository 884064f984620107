//! The memory store keeps keys apart that its map's hashed word hardly tells apart.
#![cfg(feature = "memory")]
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use idempotency_core::{
    Claim, ClaimId, ClaimRequest, CompleteRequest, Fingerprint, MemoryStore, Outcome, StorageKey,
    Store,
};

fn request<'a>(
    key: &'a StorageKey,
    namespace: &'a str,
    fingerprint: &'a Fingerprint,
    lease: Duration,
) -> ClaimRequest<'a> {
    ClaimRequest {
        key,
        namespace,
        fingerprint,
        lease,
        claim_id: ClaimId::random(),
        mechanism: None,
        key_derivation: None,
    }
}

#[tokio::test]
async fn keys_alike_in_the_hashed_word_stay_apart() {
    // Keys alike in all but two bytes (built by hand, not digests): each is its own record.
    let store = MemoryStore::new();
    let keys: Vec<StorageKey> = (0..200u8)
        .map(|n| {
            let mut key = [3u8; 32];
            key[31] = n;
            key[2] = n.wrapping_mul(7);
            StorageKey(key)
        })
        .collect();
    for (n, key) in keys.iter().enumerate() {
        let fingerprint = Fingerprint::of_bytes(&[n as u8]);
        let claim = store
            .claim(request(key, "a", &fingerprint, Duration::from_secs(60)))
            .await
            .unwrap();
        let Claim::Acquired(lease) = claim else {
            panic!("key {n} is new, got {claim:?}");
        };
        if n % 2 == 0 {
            let outcome = Outcome::new(200, bytes::Bytes::from(vec![n as u8]));
            store
                .complete(CompleteRequest {
                    key,
                    token: lease.token,
                    outcome: &outcome,
                    ttl: Duration::from_secs(60),
                })
                .await
                .unwrap();
        }
    }
    assert_eq!(store.len(), keys.len());
    for (n, key) in keys.iter().enumerate() {
        let record = store.get(key).await.unwrap().unwrap();
        assert_eq!(record.key, *key);
        assert_eq!(record.fingerprint, Fingerprint::of_bytes(&[n as u8]));
        match record.outcome {
            Some(outcome) => {
                assert_eq!(n % 2, 0);
                assert_eq!(&outcome.body[..], &[n as u8]);
            }
            None => assert_eq!(n % 2, 1),
        }
    }
    // Releasing one leaves its neighbours in place.
    let odd = &keys[1];
    let Some(record) = store.get(odd).await.unwrap() else {
        panic!("held");
    };
    store.release(odd, record.token).await.unwrap();
    assert!(store.get(odd).await.unwrap().is_none());
    assert!(store.get(&keys[3]).await.unwrap().is_some());
    assert_eq!(store.len(), keys.len() - 1);
}
