//! The checks of a store that keeps the checkpoints of runs with steps ([`Store::checkpoint`]).

use std::time::Duration;

use idempotency_core::{
    Claim, FencingToken, Outcome, Progress, RecordState, StepResult, StorageKey, Store, StoreError,
    TouchRequest,
};

use crate::support::{LONG, acquire, complete, fingerprint, request, unique_key};

fn renewal(key: &StorageKey, token: FencingToken, lease: Duration) -> TouchRequest<'_> {
    TouchRequest { key, token, lease }
}

/// A run's checkpoints: read back while the run is in progress, kept by a takeover of the same
/// payload, refused to another payload, fenced, and gone with the run's completion or release.
pub async fn checkpoints<S: Store>(store: &S) {
    let key = unique_key();
    let (a, b) = (fingerprint("a"), fingerprint("b"));
    let first = acquire(store, &key, &a, LONG).await;
    assert_eq!(store.get(&key).await.unwrap().unwrap().progress, None);

    let mut progress = Progress::new(&b"input"[..]);
    progress
        .steps
        .push(StepResult::new("reserve", serde_json::json!({"id": 7})));
    let written = store.checkpoint(renewal(&key, first.token, LONG), &progress);
    written.await.unwrap();
    let record = store.get(&key).await.unwrap().unwrap();
    assert_eq!(
        (record.state, record.token),
        (RecordState::InProgress, first.token)
    );
    assert_eq!(record.progress.as_ref(), Some(&progress));
    assert!(matches!(
        store.claim(request(&key, &a, LONG)).await.unwrap(),
        Claim::InProgress { .. }
    ));

    // A lease ended now (a paused run): another payload may not take the checkpoints over,
    // the same payload resumes them.
    let paused = store.checkpoint(renewal(&key, first.token, Duration::ZERO), &progress);
    paused.await.unwrap();
    let other = store.claim(request(&key, &b, LONG)).await.unwrap();
    assert_eq!(other, Claim::Mismatch);
    let second = acquire(store, &key, &a, LONG).await;
    assert!(second.took_over && second.token > first.token);
    let record = store.get(&key).await.unwrap().unwrap();
    assert_eq!(record.progress.as_ref(), Some(&progress));

    // The owner taken over writes nothing.
    let mut stale = progress.clone();
    stale
        .steps
        .push(StepResult::new("capture", serde_json::json!("stale")));
    let fenced = store.checkpoint(renewal(&key, first.token, LONG), &stale);
    assert!(matches!(fenced.await, Err(StoreError::LeaseLost)));
    let record = store.get(&key).await.unwrap().unwrap();
    assert_eq!(record.progress.as_ref(), Some(&progress));

    // Completed: the answer, no checkpoints, and none written after.
    let done = Outcome::new(200, "done");
    complete(store, &key, second.token, &done, LONG)
        .await
        .unwrap();
    let record = store.get(&key).await.unwrap().unwrap();
    assert_eq!((record.outcome, record.progress), (Some(done), None));
    let late = store.checkpoint(renewal(&key, second.token, LONG), &progress);
    assert!(matches!(late.await, Err(StoreError::LeaseLost)));

    // Released: the next record of the key starts without the released one's checkpoints.
    let key = unique_key();
    let lease = acquire(store, &key, &a, LONG).await;
    let written = store.checkpoint(renewal(&key, lease.token, LONG), &progress);
    written.await.unwrap();
    store.release(&key, lease.token).await.unwrap();
    acquire(store, &key, &a, LONG).await;
    assert_eq!(store.get(&key).await.unwrap().unwrap().progress, None);
}
