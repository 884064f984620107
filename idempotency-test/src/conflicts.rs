//! The conformance check of conflict marks ([`Store::mark_conflict`]).

use std::time::SystemTime;

use crate::support::{
    LONG, PAST_SHORT, SHORT, acquire, binary_outcome, complete, fingerprint, request, touch,
    unique_key,
};
use idempotency_core::{Claim, Record, RecordState, Store};

/// `record` without its conflict mark: what marking must leave as it was.
fn unmarked(record: &Record) -> Record {
    Record {
        conflicts: 0,
        last_conflict_at: None,
        ..record.clone()
    }
}

/// A conflict mark counts conflicts and keeps the last one's time on the record, in progress
/// or completed, and changes nothing else (state, fingerprint, token, times, outcome, expiry):
/// the owner still touches and completes, duplicates still replay. An absent key is not
/// marked; a record started anew (after a release, or after expiry) starts unmarked.
pub async fn conflict_marks<S: Store>(store: &S) {
    let absent = unique_key();
    assert!(!store.mark_conflict(&absent).await.unwrap());
    assert_eq!(store.get(&absent).await.unwrap(), None);

    let key = unique_key();
    let fp = fingerprint("conflicted");
    let lease = acquire(store, &key, &fp, LONG).await;
    let before = store.get(&key).await.unwrap().unwrap();
    assert_eq!((before.conflicts, before.last_conflict_at), (0, None));
    let started = SystemTime::now() - std::time::Duration::from_secs(5);
    assert!(store.mark_conflict(&key).await.unwrap());
    let marked = store.get(&key).await.unwrap().unwrap();
    assert_eq!(marked.conflicts, 1);
    let first_at = marked.last_conflict_at.expect("the mark's time");
    assert!(first_at >= started, "{first_at:?} is the mark's time");
    assert_eq!(unmarked(&marked), before, "marking changed only the mark");

    // The owner keeps its lease: it renews and completes as before, the mark stays.
    touch(store, &key, lease.token, LONG).await.unwrap();
    let outcome = binary_outcome();
    complete(store, &key, lease.token, &outcome, LONG)
        .await
        .unwrap();
    let completed = store.get(&key).await.unwrap().unwrap();
    assert_eq!(completed.state, RecordState::Completed);
    assert_eq!(
        (completed.conflicts, completed.last_conflict_at),
        (1, Some(first_at))
    );

    assert!(store.mark_conflict(&key).await.unwrap());
    assert!(store.mark_conflict(&key).await.unwrap());
    let twice = store.get(&key).await.unwrap().unwrap();
    assert_eq!(twice.conflicts, 3);
    assert!(twice.last_conflict_at.is_some_and(|at| at >= first_at));
    assert_eq!(unmarked(&twice), unmarked(&completed));
    assert_eq!(
        store.claim(request(&key, &fp, LONG)).await.unwrap(),
        Claim::Completed(outcome)
    );
    let other = fingerprint("another amount");
    assert_eq!(
        store.claim(request(&key, &other, LONG)).await.unwrap(),
        Claim::Mismatch
    );

    // Released, then claimed again: a new record, unmarked.
    let released = unique_key();
    let lease = acquire(store, &released, &fp, LONG).await;
    assert!(store.mark_conflict(&released).await.unwrap());
    store.release(&released, lease.token).await.unwrap();
    acquire(store, &released, &fp, LONG).await;
    let again = store.get(&released).await.unwrap().unwrap();
    assert_eq!((again.conflicts, again.last_conflict_at), (0, None));

    // Expired, then claimed again: a new record, unmarked.
    let expiring = unique_key();
    let lease = acquire(store, &expiring, &fp, LONG).await;
    complete(store, &expiring, lease.token, &binary_outcome(), SHORT)
        .await
        .unwrap();
    assert!(store.mark_conflict(&expiring).await.unwrap());
    tokio::time::sleep(PAST_SHORT).await;
    acquire(store, &expiring, &fp, LONG).await;
    let renewed = store.get(&expiring).await.unwrap().unwrap();
    assert_eq!((renewed.conflicts, renewed.last_conflict_at), (0, None));
}
