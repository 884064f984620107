//! Redis-specific behaviour beyond the shared suite: the packed binary record (one layout for
//! the native claim and the scripts), the abandoned lease grace, leases decided by the server's
//! TTL rather than a client clock, and client-issued fencing tokens that stay monotonic past
//! tokens ahead of the clock.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use idempotency_core::{
    Claim, ClaimRequest, CompleteRequest, FencingToken, Fingerprint, Lease, Outcome, RecordState,
    StorageKey, Store, TouchRequest,
};
use idempotency_redis::{RedisStore, driver};
use idempotency_test::{unavailable, unique_key};

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
        claim_id: idempotency_core::ClaimId::random(),
        mechanism: None,
        key_derivation: None,
    }
}

async fn acquire(store: &RedisStore, key: &StorageKey, fp: &Fingerprint, lease: Duration) -> Lease {
    match store.claim(request(key, fp, lease)).await.unwrap() {
        Claim::Acquired(lease) => lease,
        other => panic!("expected to acquire, got {other:?}"),
    }
}

/// Rewrites a record's bytes in place, keeping its TTL (as another process, or another clock,
/// would have written them).
async fn rewrite(store: &RedisStore, key: &StorageKey, edit: impl FnOnce(&mut Vec<u8>)) {
    let mut stored = raw(store, key).await.expect("record");
    edit(&mut stored);
    let mut connection = store.connection().clone();
    let () = driver::cmd("SET")
        .arg(store.record_key(key))
        .arg(stored)
        .arg("KEEPTTL")
        .query_async(&mut connection)
        .await
        .unwrap();
}

async fn pttl(store: &RedisStore, key: &StorageKey) -> i64 {
    let mut connection = store.connection().clone();
    driver::cmd("PTTL")
        .arg(store.record_key(key))
        .query_async(&mut connection)
        .await
        .unwrap()
}

fn u64_at(record: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(record[at..at + 8].try_into().unwrap())
}

fn unix_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
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
        .complete(CompleteRequest {
            key: &key,
            token: lease.token,
            outcome: &Outcome::new(201, body.clone()),
            ttl: Duration::from_secs(60),
        })
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
    assert_eq!(&stored[33..41], &lease.token.get().to_be_bytes()[..]);
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
async fn a_released_token_ahead_of_the_clock_orders_the_next_claim() {
    let Some(store) = store().await else { return };
    let key = unique_key();
    let fp = Fingerprint::of_bytes(b"payload");
    let lease = acquire(&store, &key, &fp, Duration::from_secs(30)).await;

    // Simulate a token ahead of this process's clock (issued by a process whose clock is a
    // second ahead, or before this clock was set back): rewrite it in place.
    let ahead = FencingToken::new(lease.token.get() + 1_000_000);
    let mut stored = raw(&store, &key).await.unwrap();
    stored[33..41].copy_from_slice(&ahead.get().to_be_bytes());
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

#[tokio::test]
async fn the_native_claim_and_the_claim_script_write_one_layout() {
    let Some(store) = store().await else { return };
    let grace = Duration::from_millis(1500);
    let store = store.with_abandoned_grace(grace);
    let key = unique_key();
    let fp = Fingerprint::of_bytes(b"payload");
    let lease = Duration::from_millis(100);

    // Written by the native `SET ... NX GET`.
    let first = acquire(&store, &key, &fp, lease).await;
    let native = raw(&store, &key).await.unwrap();
    assert_eq!(
        native.len(),
        81 + "orders".len(),
        "header + namespace, no body"
    );
    assert_eq!(native[0], b'p');
    assert_eq!(&native[1..33], &fp.0[..]);
    assert_eq!(u64_at(&native, 33), first.token.get());
    assert_eq!(&native[41..45], &1u32.to_be_bytes()[..], "attempt 1");
    assert_eq!(
        u64_at(&native, 61) - u64_at(&native, 53),
        100,
        "lease end = updated + lease"
    );
    assert_eq!(
        u64_at(&native, 69),
        1500,
        "the grace, for the script's PTTL - grace"
    );
    assert_eq!(
        &native[77..81],
        &[0, 0, 0, 6][..],
        "status 0, namespace length"
    );
    assert_eq!(&native[81..], b"orders");
    let ttl = pttl(&store, &key).await;
    assert!(ttl > 0 && ttl <= 1600, "the key lives lease + grace: {ttl}");

    // Taken over by the script, after the lease: same layout, attempt 2, created kept.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = acquire(&store, &key, &fp, Duration::from_secs(30)).await;
    assert!(second.took_over && second.token > first.token);
    let scripted = raw(&store, &key).await.unwrap();
    assert_eq!(scripted.len(), native.len());
    assert_eq!(scripted[..33], native[..33]);
    assert_eq!(u64_at(&scripted, 33), second.token.get());
    assert_eq!(&scripted[41..45], &2u32.to_be_bytes()[..], "attempt 2");
    assert_eq!(scripted[45..53], native[45..53], "created is kept");
    assert_eq!(u64_at(&scripted, 61) - u64_at(&scripted, 53), 30_000);
    assert_eq!(u64_at(&scripted, 69), 1500);
    assert_eq!(scripted[77..], native[77..]);

    // The native claim reads the script's record; the scripts step on it; `get` decodes both.
    match store.claim(request(&key, &fp, lease)).await.unwrap() {
        Claim::InProgress { lease_remaining } => {
            assert!(
                lease_remaining > Duration::from_secs(25)
                    && lease_remaining <= Duration::from_secs(30)
            );
        }
        other => panic!("a live lease, got {other:?}"),
    }
    let record = store.get(&key).await.unwrap().unwrap();
    assert_eq!(
        (record.state, record.token, record.attempts),
        (RecordState::InProgress, second.token, 2)
    );
    store
        .touch(TouchRequest {
            key: &key,
            token: second.token,
            lease: Duration::from_secs(20),
        })
        .await
        .unwrap();
    let touched = raw(&store, &key).await.unwrap();
    assert_eq!(u64_at(&touched, 61) - u64_at(&touched, 53), 20_000);
    assert_eq!(touched[..53], scripted[..53]);
    assert_eq!(touched[69..], scripted[69..]);
    store
        .complete(CompleteRequest {
            key: &key,
            token: second.token,
            outcome: &Outcome::new(201, "done"),
            ttl: Duration::from_secs(60),
        })
        .await
        .unwrap();
    let record = store.get(&key).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Completed);
    assert_eq!(record.attempts, 2);
    assert_eq!(record.outcome, Some(Outcome::new(201, "done")));
    assert_eq!(
        store.claim(request(&key, &fp, lease)).await.unwrap(),
        Claim::Completed(Outcome::new(201, "done"))
    );
}

/// The stored lease end is written by the owner's clock and is only a hint: whatever it says,
/// a live lease (by the server's TTL) is never taken over, and an ended one is taken over as
/// soon as the claim asks the server.
#[tokio::test]
async fn leases_end_by_the_server_ttl_not_by_the_stored_lease_end() {
    let Some(store) = store().await else { return };
    let fp = Fingerprint::of_bytes(b"payload");

    // An owner whose clock is an hour behind: its stored lease end is long past.
    let key = unique_key();
    let owner = acquire(&store, &key, &fp, Duration::from_secs(30)).await;
    rewrite(&store, &key, |record| {
        let behind = u64_at(record, 61) - 3_600_000;
        record[61..69].copy_from_slice(&behind.to_be_bytes());
    })
    .await;
    match store
        .claim(request(&key, &fp, Duration::from_secs(30)))
        .await
        .unwrap()
    {
        Claim::InProgress { lease_remaining } => assert!(lease_remaining > Duration::from_secs(25)),
        other => panic!("a live lease is never taken over, got {other:?}"),
    }
    assert_eq!(
        store
            .claim(request(
                &key,
                &Fingerprint::of_bytes(b"other"),
                Duration::from_secs(30)
            ))
            .await
            .unwrap(),
        Claim::Mismatch
    );
    assert_eq!(store.get(&key).await.unwrap().unwrap().token, owner.token);
    store
        .touch(TouchRequest {
            key: &key,
            token: owner.token,
            lease: Duration::from_secs(30),
        })
        .await
        .unwrap();

    // An owner whose clock is an hour ahead, and whose lease has ended by the server's TTL:
    // within the default margin the claim trusts the stored end ("in progress")...
    let store = store.with_abandoned_grace(Duration::from_secs(5));
    let key = unique_key();
    let crashed = acquire(&store, &key, &fp, Duration::from_millis(100)).await;
    rewrite(&store, &key, |record| {
        let ahead = u64_at(record, 61) + 3_600_000;
        record[61..69].copy_from_slice(&ahead.to_be_bytes());
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(matches!(
        store
            .claim(request(&key, &fp, Duration::from_secs(30)))
            .await
            .unwrap(),
        Claim::InProgress { .. }
    ));
    // ...and a margin as wide as the skew hands the decision to the server: a takeover.
    let wide = store
        .clone()
        .with_clock_margin(Duration::from_secs(2 * 3600));
    let taker = acquire(&wide, &key, &fp, Duration::from_secs(30)).await;
    assert!(taker.took_over && taker.attempt == 2 && taker.token > crashed.token);
}

/// A token ahead of every clock (written by a process whose clock runs an hour ahead) is
/// exceeded by a takeover of its lease, and by every later token of a process that saw it.
#[tokio::test]
async fn tokens_ahead_of_the_clock_are_exceeded_by_takeovers_and_later_claims() {
    let Some(store) = store().await else { return };
    let store = store.with_abandoned_grace(Duration::from_secs(5));
    let fp = Fingerprint::of_bytes(b"payload");
    let key = unique_key();
    acquire(&store, &key, &fp, Duration::from_millis(100)).await;
    let ahead = unix_micros() + 3_600_000_000;
    rewrite(&store, &key, |record| {
        record[33..41].copy_from_slice(&ahead.to_be_bytes());
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let taker = acquire(&store, &key, &fp, Duration::from_secs(30)).await;
    assert!(taker.took_over);
    assert!(
        taker.token.get() > ahead,
        "the takeover token exceeds the taken-over one"
    );
    let later = acquire(&store, &unique_key(), &fp, Duration::from_secs(30)).await;
    assert!(
        later.token > taker.token,
        "and so does every later token of this process"
    );

    // A token only seen in a record (a live lease of another process) orders later tokens too.
    let key = unique_key();
    acquire(&store, &key, &fp, Duration::from_secs(30)).await;
    let further = later.token.get() + 3_600_000_000;
    rewrite(&store, &key, |record| {
        record[33..41].copy_from_slice(&further.to_be_bytes());
    })
    .await;
    assert!(matches!(
        store
            .claim(request(&key, &fp, Duration::from_secs(30)))
            .await
            .unwrap(),
        Claim::InProgress { .. }
    ));
    let after = acquire(&store, &unique_key(), &fp, Duration::from_secs(30)).await;
    assert!(after.token.get() > further);
}

/// A process remembers the keys it completed and reads their duplicates with `GET`. What it
/// reads must be what is there now: after the record expired and another process claimed the
/// key again, it sees that lease in progress, then that owner's outcome, never its own old one.
#[tokio::test]
async fn a_remembered_key_claimed_again_elsewhere_answers_what_is_there_now() {
    let Some(first) = store().await else { return };
    let second = RedisStore::new(first.connection().clone()).with_key_prefix(PREFIX);
    let (key, fp) = (unique_key(), Fingerprint::of_bytes(b"order"));
    let lease = Duration::from_secs(30);

    let token = acquire(&first, &key, &fp, lease).await.token;
    let old = Outcome::new(201, "first run");
    first
        .complete(CompleteRequest {
            key: &key,
            token,
            outcome: &old,
            ttl: Duration::from_millis(100),
        })
        .await
        .unwrap();
    let replay = first.claim(request(&key, &fp, lease)).await.unwrap();
    assert_eq!(replay, Claim::Completed(old));
    tokio::time::sleep(Duration::from_millis(250)).await;

    // Expired: the other process claims the key anew, with another payload.
    let other = Fingerprint::of_bytes(b"another order");
    let token = acquire(&second, &key, &other, lease).await.token;
    assert!(matches!(
        first.claim(request(&key, &other, lease)).await.unwrap(),
        Claim::InProgress { .. }
    ));
    assert_eq!(
        first.claim(request(&key, &fp, lease)).await.unwrap(),
        Claim::Mismatch,
        "the live lease is another payload's"
    );
    let new = Outcome::new(201, "second run");
    second
        .complete(CompleteRequest {
            key: &key,
            token,
            outcome: &new,
            ttl: Duration::from_secs(30),
        })
        .await
        .unwrap();
    assert_eq!(
        first.claim(request(&key, &other, lease)).await.unwrap(),
        Claim::Completed(new)
    );
    assert_eq!(
        first.claim(request(&key, &fp, lease)).await.unwrap(),
        Claim::Mismatch
    );
}
