//! The fast tier of two tiers once the truth has decided. A new message's claim stays
//! **pending**: the truth committed with the work, so the fast tier needs no second round
//! trip. The first duplicate that meets a pending claim asks the truth, then completes the claim
//! with the output, so that later duplicates replay in one round trip.

use bytes::Bytes;
use idempotency_core::{
    CompleteRequest, Fingerprint, Idempotency, Outcome, RecordState, StorageKey, Store,
};

/// Completes the pending claim of `key` (used with `fingerprint`) with `output`, as the truth
/// settled it. A claim taken over meanwhile, completed already or gone is left as it is;
/// failures are logged: the truth answers duplicates either way.
pub(crate) async fn settle<S: Store>(
    engine: &Idempotency<S>,
    key: &StorageKey,
    fingerprint: &Fingerprint,
    output: &Bytes,
) {
    let store = engine.store();
    let config = engine.config();
    let settle = async {
        let Some(record) = store.get(key).await? else {
            return Ok(());
        };
        if record.state != RecordState::InProgress || record.fingerprint != *fingerprint {
            return Ok(());
        }
        let outcome = Outcome::new(0, output.clone());
        store
            .complete(CompleteRequest {
                key,
                token: record.token,
                outcome: &outcome,
                ttl: config.ttl,
            })
            .await
    };
    match tokio::time::timeout(config.store_timeout * 2, settle).await {
        Ok(Ok(())) | Ok(Err(idempotency_core::StoreError::LeaseLost)) => {}
        Ok(Err(error)) => {
            tracing::debug!(key = %key, %error, "a pending fast-tier claim was not settled")
        }
        Err(_) => tracing::debug!(key = %key, "a pending fast-tier claim was not settled in time"),
    }
}
