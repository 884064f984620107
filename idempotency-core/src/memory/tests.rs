//! The memory store's own tests, beside the conformance suite.
#![allow(clippy::unwrap_used)]

use super::*;
use crate::memory::shards::{Keyed, shard_of};

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
async fn records_of_one_shard_keep_their_own_namespace() {
    let store = MemoryStore::new();
    let fingerprint = Fingerprint::of_bytes(b"x");
    // Keys of one shard, whose shared namespace changes between claims.
    let shard = shard_of(&StorageKey([0; 32]));
    let keys: Vec<StorageKey> = (0..u32::MAX)
        .map(|n| {
            let mut key = [0; 32];
            key[..4].copy_from_slice(&n.to_le_bytes());
            StorageKey(key)
        })
        .filter(|key| shard_of(key) == shard)
        .take(6)
        .collect();
    let names = ["a", "b", "a", "a", "c", "b"];
    for (key, name) in keys.iter().zip(names) {
        let claim = store
            .claim(request(key, name, &fingerprint, Duration::from_secs(60)))
            .await
            .unwrap();
        assert!(matches!(claim, Claim::Acquired(_)));
    }
    for (key, name) in keys.iter().zip(names) {
        let record = store.get(key).await.unwrap().unwrap();
        assert_eq!(record.namespace, name);
        assert_eq!(record.key, *key);
    }
    // A record taken over after its lease ended takes the claimer's namespace.
    let short = StorageKey([9; 32]);
    store
        .claim(request(&short, "a", &fingerprint, Duration::ZERO))
        .await
        .unwrap();
    let Claim::Acquired(lease) = store
        .claim(request(&short, "z", &fingerprint, Duration::from_secs(60)))
        .await
        .unwrap()
    else {
        panic!("an ended lease is taken over");
    };
    assert!(lease.took_over);
    assert_eq!(store.get(&short).await.unwrap().unwrap().namespace, "z");
}

mod footprint {
    use super::*;

    /// What each record costs in memory: its map slot and its box (glibc rounds the box up to
    /// 16 bytes and adds 8). A service that keeps a day of keys keeps this many bytes per key.
    #[test]
    fn a_record_box_stays_within_168_bytes_and_its_slot_16() {
        assert_eq!(std::mem::size_of::<Slot<Entry>>(), 16);
        // 168: glibc's 176-byte blocks (the next size up is 192).
        let boxed = std::mem::size_of::<Keyed<Entry>>();
        assert!(boxed <= 168, "Keyed<Entry> is {boxed} bytes");
    }
}
