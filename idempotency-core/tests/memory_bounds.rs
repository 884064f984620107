//! The memory store is bounded by default: records and bytes of stored responses. Beyond
//! either bound new keys are refused (logged and counted); keys it holds are still answered.
#![cfg(feature = "memory")]
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use bytes::Bytes;
use idempotency_core::metrics::MEMORY_STORE_FULL;
use idempotency_core::{
    Claim, ClaimId, ClaimRequest, CompleteRequest, DEFAULT_MEMORY_MAX_BYTES, Fingerprint,
    MemoryStore, Outcome, StorageKey, Store, StoreError,
};
use idempotency_test::unique_key;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

fn request<'a>(key: &'a StorageKey, fingerprint: &'a Fingerprint) -> ClaimRequest<'a> {
    ClaimRequest {
        key,
        namespace: "bounds",
        fingerprint,
        lease: Duration::from_secs(60),
        claim_id: ClaimId::random(),
        mechanism: None,
        key_derivation: None,
    }
}

/// Claims and completes a new key with a body of `len` bytes; `Err` if the claim is refused.
async fn store_one(store: &MemoryStore, key: &StorageKey, len: usize) -> Result<(), StoreError> {
    let fingerprint = Fingerprint::of_bytes(b"order");
    let Claim::Acquired(lease) = store.claim(request(key, &fingerprint)).await? else {
        panic!("a new key");
    };
    let outcome = Outcome::new(201, Bytes::from(vec![b'x'; len]));
    store
        .complete(CompleteRequest {
            key,
            token: lease.token,
            outcome: &outcome,
            ttl: Duration::from_secs(60),
        })
        .await
}

/// A store built with no bound set refuses new keys once the default bytes of responses are
/// held, counts the refusal, and still replays what it holds.
#[test]
fn the_default_store_is_bounded_by_the_bytes_of_its_responses() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let store = MemoryStore::new();
            let body = 1024 * 1024;
            let mut held = Vec::new();
            let refused = loop {
                let key = unique_key();
                match store_one(&store, &key, body).await {
                    Ok(()) => held.push(key),
                    Err(error) => break error,
                }
                assert!(
                    held.len() <= DEFAULT_MEMORY_MAX_BYTES / body,
                    "never refused"
                );
            };
            assert!(
                matches!(refused, StoreError::CapacityExceeded(_)),
                "{refused}"
            );
            assert_eq!(held.len(), DEFAULT_MEMORY_MAX_BYTES / body);
            assert_eq!(store.stored_bytes(), DEFAULT_MEMORY_MAX_BYTES);
            // What it holds is still answered.
            let fingerprint = Fingerprint::of_bytes(b"order");
            let replay = store.claim(request(&held[0], &fingerprint)).await.unwrap();
            assert!(matches!(replay, Claim::Completed(_)));
        })
    });
    let refusals: u64 = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == MEMORY_STORE_FULL)
        .map(|(.., value)| match value {
            DebugValue::Counter(count) => count,
            other => panic!("a counter, got {other:?}"),
        })
        .sum();
    assert_eq!(refusals, 1);
}

/// Both bounds can be set; released and purged records give their room back.
#[tokio::test]
async fn room_comes_back_as_records_go() {
    let store = MemoryStore::with_capacity(2).with_max_bytes(100);
    let (a, b, c) = (unique_key(), unique_key(), unique_key());
    store_one(&store, &a, 60).await.unwrap();
    store_one(&store, &b, 60).await.unwrap();
    assert_eq!((store.len(), store.stored_bytes()), (2, 120));
    assert!(matches!(
        store_one(&store, &c, 1).await,
        Err(StoreError::CapacityExceeded(2))
    ));
    // A record deleted, or released, gives its room back.
    let fingerprint = Fingerprint::of_bytes(b"order");
    let held = store.get(&a).await.unwrap().unwrap();
    assert!(store.delete_fenced(&a, held.token));
    assert_eq!((store.len(), store.stored_bytes()), (1, 60));
    let Claim::Acquired(lease) = store.claim(request(&c, &fingerprint)).await.unwrap() else {
        panic!("room for one more");
    };
    store.release(&c, lease.token).await.unwrap();
    assert_eq!((store.len(), store.stored_bytes()), (1, 60));
}
