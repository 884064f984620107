//! The answer to a conflict (a key reused with another fingerprint) when the layer replays the
//! stored response ([`ConflictAnswer::ReplayStored`](crate::ConflictAnswer::ReplayStored)).

use std::time::{Duration, SystemTime};

use idempotency_core::{Decision, RecordState, StorageKey, Store, StoreError};

use super::layer::Shared;

/// What a conflicting request gets: the stored response of the record it collided with (one
/// store read, on this rare path only), or, while that record is still in progress, the answer
/// to a duplicate in flight. Logged at WARN (target `idempotency`, with the record's id),
/// counted ([`idempotency_core::metrics::CONFLICTS`]) and marked on the record (in the same
/// time as the read; [`mark`]) either way.
pub(super) async fn stored_answer<S: Store>(
    shared: &Shared<S>,
    key: StorageKey,
) -> Result<Decision<S>, StoreError> {
    crate::answer::report_conflict(&shared.settings, &key);

    let engine = &shared.engine;
    let timeout = engine.config().store_timeout;
    let read = tokio::time::timeout(timeout, engine.store().get(&key));
    let (record, ()) = tokio::join!(read, mark(shared, key));
    let record = match record {
        Ok(record) => record?,
        Err(_) => return Err(StoreError::Timeout(timeout)),
    };
    Ok(match record {
        Some(record) if record.state == RecordState::Completed => match record.outcome {
            Some(outcome) => Decision::Replay(outcome),
            None => {
                return Err(StoreError::Codec(
                    "a completed record without outcome".into(),
                ));
            }
        },
        // The first request still runs: the retry meets its stored response.
        Some(record) => Decision::InFlight {
            retry_after: record
                .expires_at
                .duration_since(SystemTime::now())
                .unwrap_or_default()
                .max(Duration::from_secs(1)),
        },
        // The record went meanwhile: the retry claims the key afresh.
        None => Decision::InFlight {
            retry_after: Duration::from_secs(1),
        },
    })
}

/// Marks the record a request with another payload met, whatever the layer answers it
/// ([`Store::mark_conflict`]): a failure is logged and changes nothing of the answer.
pub(super) async fn mark<S: Store>(shared: &Shared<S>, key: StorageKey) {
    let engine = &shared.engine;
    let timeout = engine.config().store_timeout;
    let namespace = shared.settings.scope.namespace();
    crate::answer::mark_conflict(engine.store(), timeout, namespace, &key).await;
}
