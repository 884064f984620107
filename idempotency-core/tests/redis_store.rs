//! Redis-specific behaviour beyond the shared suite: the packed binary record, the abandoned
//! lease grace, and fencing tokens that stay monotonic when a deleted key's token was ahead of
//! the server clock.
#![cfg(feature = "redis")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use idempotency_core::redis::{RedisStore, driver};
use idempotency_core::testing::{unavailable, unique_key};
use idempotency_core::{
    Claim, ClaimRequest, FencingToken, Fingerprint, Lease, Outcome, StorageKey, Store,
};

const PREFIX: &str = "test:redis-store:";

async fn store() -> Option<RedisStore> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    // Through a client configured by the caller (`connect(url)` is the short form).
    let client = driver::Client::open(url).unwrap();
    match RedisStore::from_client(client).await {
        Ok(store) => Some(store.with_key_prefix(PREFIX)),
        Err(error) => unavailable("Redis", error),
    }
}

fn request<'a>(key: &'a StorageKey, fp: &'a Fingerprint, lease: Duration) -> ClaimRequest<'a> {
    ClaimRequest {
        key,
        namespace: "orders",
        fingerprint: fp,
        lease,
    }
}

async fn acquire(store: &RedisStore, key: &StorageKey, fp: &Fingerprint, lease: Duration) -> Lease {
    match store.claim(request(key, fp, lease)).await.unwrap() {
        Claim::Acquired(lease) => lease,
        other => panic!("expected to acquire, got {other:?}"),
    }
}

async fn raw(store: &RedisStore, key: &StorageKey) -> Option<Vec<u8>> {
    let mut connection = store.connection().clone();
    driver::cmd("GET")
        .arg(store.record_key(key))
        .query_async(&mut connection)
        .await
        .unwrap()
}

#[tokio::test]
async fn records_are_one_packed_binary_string_with_a_native_ttl() {
    let Some(store) = store().await else { return };
    let key = unique_key();
    let fp = Fingerprint::of_bytes(b"payload");
    let lease = acquire(&store, &key, &fp, Duration::from_secs(30)).await;
    let body: Vec<u8> = (0..=255u8).collect();
    store
        .complete(
            &key,
            lease.token,
            &Outcome::new(201, body.clone()),
            Duration::from_secs(60),
        )
        .await
        .unwrap();

    let stored = raw(&store, &key).await.expect("record");
    assert_eq!(
        stored.len(),
        81 + "orders".len() + body.len(),
        "header + namespace + body"
    );
    assert_eq!(stored[0], b'c');
    assert_eq!(&stored[1..33], &fp.0[..], "raw fingerprint bytes");
    assert_eq!(&stored[33..41], &lease.token.0.to_be_bytes()[..]);
    assert_eq!(&stored[81..87], b"orders");
    assert!(stored.ends_with(&body), "the body is stored as raw bytes");

    let mut connection = store.connection().clone();
    let ttl: i64 = driver::cmd("PTTL")
        .arg(store.record_key(&key))
        .query_async(&mut connection)
        .await
        .unwrap();
    assert!(
        ttl > 0 && ttl <= 60_000,
        "completed records carry their TTL natively: {ttl}"
    );
}

#[tokio::test]
async fn abandoned_leases_are_kept_for_the_grace_then_vanish() {
    let Some(store) = store().await else { return };
    let store = store.with_abandoned_grace(Duration::from_millis(1500));
    let key = unique_key();
    let fp = Fingerprint::of_bytes(b"payload");
    let first = acquire(&store, &key, &fp, Duration::from_millis(100)).await;

    // Past the lease, within the grace: the record is still there and the claim is a takeover.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(store.get(&key).await.unwrap().is_some());
    let second = acquire(&store, &key, &fp, Duration::from_millis(100)).await;
    assert!(second.took_over);
    assert_eq!(second.attempt, 2);
    assert!(second.token > first.token);

    // Past lease + grace: the key is gone natively; the next claim is a fresh first attempt
    // whose token is still greater.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert_eq!(store.get(&key).await.unwrap(), None);
    let third = acquire(&store, &key, &fp, Duration::from_secs(30)).await;
    assert!(!third.took_over);
    assert_eq!(third.attempt, 1);
    assert!(third.token > second.token);
}

#[tokio::test]
async fn a_released_token_ahead_of_the_clock_is_fenced() {
    let Some(store) = store().await else { return };
    let key = unique_key();
    let fp = Fingerprint::of_bytes(b"payload");
    let lease = acquire(&store, &key, &fp, Duration::from_secs(30)).await;

    // Simulate a token ahead of the server clock (owners faster than the clock's microseconds,
    // or a record written before the clock was set back by a second): rewrite it in place.
    let ahead = FencingToken(lease.token.0 + 1_000_000);
    let mut stored = raw(&store, &key).await.unwrap();
    stored[33..41].copy_from_slice(&ahead.0.to_be_bytes());
    let mut connection = store.connection().clone();
    let () = driver::cmd("SET")
        .arg(store.record_key(&key))
        .arg(stored)
        .arg("PX")
        .arg(30_000)
        .query_async(&mut connection)
        .await
        .unwrap();

    store.release(&key, ahead).await.unwrap();
    assert_eq!(store.get(&key).await.unwrap(), None);
    let next = acquire(&store, &key, &fp, Duration::from_secs(30)).await;
    assert!(
        next.token > ahead,
        "a re-claim after release never gets a smaller token ({:?} <= {ahead:?})",
        next.token
    );
    assert!(!next.took_over);
}
