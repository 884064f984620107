//! The fast tier of two tiers once the truth has decided. A new message's claim stays
//! **pending**: the truth committed with the work, so the fast tier needs no second round
//! trip. The first duplicate that meets a pending claim asks the truth, then settles the claim
//! with the output ([`Store::settle`]: one script on Redis, one round trip), so that later
//! duplicates replay in one round trip.

use bytes::Bytes;
use idempotency_core::{Fingerprint, Idempotency, Outcome, StorageKey, Store};

/// Completes the pending claim of `key` (used with `fingerprint`) with `output`, as the truth
/// settled it. A claim completed already, of another fingerprint, or gone is left as it is;
/// failures are logged: the truth answers duplicates either way.
pub(crate) async fn settle<S: Store>(
    engine: &Idempotency<S>,
    key: &StorageKey,
    fingerprint: &Fingerprint,
    output: &Bytes,
) {
    let config = engine.config();
    let outcome = Outcome::new(0, output.clone());
    let settle = engine
        .store()
        .settle(key, fingerprint, &outcome, config.ttl);
    match tokio::time::timeout(config.store_timeout * 2, settle).await {
        Ok(Ok(_)) => {}
        Ok(Err(error)) => {
            tracing::debug!(key = %key, %error, "a pending fast-tier claim was not settled")
        }
        Err(_) => tracing::debug!(key = %key, "a pending fast-tier claim was not settled in time"),
    }
}
