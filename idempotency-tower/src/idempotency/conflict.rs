//! The answer to a conflict (a key reused with another fingerprint) when the layer replays the
//! stored response ([`ConflictAnswer::ReplayStored`](crate::ConflictAnswer::ReplayStored)).

use std::time::{Duration, SystemTime};

use idempotency_core::{Decision, Fingerprint, Record, RecordState, StorageKey, Store, StoreError};

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
    let (record, ()) = tokio::join!(read(shared, key), mark(shared, key));
    answer_of(record?)
}

/// The answer to a request whose key holds another fingerprint, when the layer reads the
/// fingerprint it computed before a change too (`previous`): a record written under that one
/// is the same request's, answered as a duplicate (unmarked); any other is a conflict, answered
/// per the layer's [`ConflictAnswer`](crate::ConflictAnswer) (`replay_conflicts`) or refused
/// by the caller ([`Decision::Mismatch`]).
pub(super) async fn previous_or_conflict<S: Store>(
    shared: &Shared<S>,
    key: StorageKey,
    previous: Option<Fingerprint>,
    replay_conflicts: bool,
) -> Result<Decision<S>, StoreError> {
    if let Some(previous) = previous {
        let record = read(shared, key).await?;
        if record
            .as_ref()
            .is_some_and(|record| record.fingerprint == previous)
        {
            tracing::debug!(record = %key.to_hex(), "written under the previous fingerprint: a duplicate");
            return answer_of(record);
        }
    }
    if replay_conflicts {
        return stored_answer(shared, key).await;
    }
    Ok(Decision::Mismatch)
}

/// The record of `key`, read within the store timeout.
async fn read<S: Store>(shared: &Shared<S>, key: StorageKey) -> Result<Option<Record>, StoreError> {
    let engine = &shared.engine;
    let timeout = engine.config().store_timeout;
    match tokio::time::timeout(timeout, engine.store().get(&key)).await {
        Ok(record) => record,
        Err(_) => Err(StoreError::Timeout(timeout)),
    }
}

/// A duplicate's answer from its record: the stored response once completed, in flight while
/// it runs, and (the record gone meanwhile) in flight too, so that the retry claims afresh.
fn answer_of<S: Store>(record: Option<Record>) -> Result<Decision<S>, StoreError> {
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
