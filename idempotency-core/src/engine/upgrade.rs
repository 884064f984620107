//! The upgrade from 0.1: 0.1 keyed every mechanism's records alike, as requests are keyed
//! ([`Mechanism::Request`](crate::Mechanism::Request)); 0.2 keys functions and transactions by
//! their mechanism, so that no mechanism answers for another. While a fleet runs both, and until
//! the records 0.1 wrote have expired, a function call claims its key of 0.1 first and then its
//! own ([`Config::keys_of_0_1`](super::Config::keys_of_0_1)):
//!
//! - a 0.1 node claims only the key of 0.1, so the two serialize there: never two runs;
//! - a record 0.1 completed is replayed from there, and one in flight answers in flight;
//! - a node with the setting off claims only its own key, which bridged nodes claim too.
//!
//! Both records are completed (the key of 0.1 first: 0.1 nodes look only there) or released
//! together.

use super::{Decision, Idempotency, NamespaceRef};
use crate::{Fingerprint, InFlightPolicy, StorageKey, Store, StoreError};

impl<S: Store> Idempotency<S> {
    /// Claims `key_of_0_1`, then `key`: the decision of the first that does not execute, or one
    /// execution holding both.
    pub(crate) async fn claim_bridged(
        &self,
        namespace: &str,
        key: StorageKey,
        key_of_0_1: StorageKey,
        fingerprint: &Fingerprint,
        in_flight: InFlightPolicy,
    ) -> Result<Decision<S>, StoreError> {
        let named = NamespaceRef::Name(namespace);
        let older = match self
            .claim_in(named, key_of_0_1, fingerprint, in_flight)
            .await?
        {
            Decision::Execute(older) => older,
            answered => return Ok(answered),
        };
        match self.claim_in(named, key, fingerprint, in_flight).await {
            Ok(Decision::Execute(mut execution)) => {
                execution.key_of_0_1 = Some(Box::new(older));
                Ok(Decision::Execute(execution))
            }
            // The key is another node's: give the one of 0.1 back at once.
            other => {
                let _ = older.release().await;
                other
            }
        }
    }
}
