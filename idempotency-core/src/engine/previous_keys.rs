//! Claims under the previous key derivation beside this release's (see [`crate::derivation`]):
//! while a fleet runs the previous release and this one, and until the records the previous
//! one wrote have expired (one TTL), a claim takes the previous derivation's key first and
//! then its own ([`Config::previous_keys`](super::Config::previous_keys)):
//!
//! - a node of the previous release claims only the previous key, so the two serialize there:
//!   never two runs;
//! - a record the previous release completed is replayed from there, and one in flight
//!   answers in flight;
//! - a node with the setting off claims only its own key, which nodes reading previous keys
//!   claim too.
//!
//! Both records are completed (the previous key first: nodes of the previous release look only
//! there) or released together.

use super::{Decision, Idempotency, NamespaceRef};
use crate::derivation::{self, Origin, Tier};
use crate::{Fingerprint, InFlightPolicy, Scope, Store, StoreError};

impl<S: Store> Idempotency<S> {
    /// [`claim`](Self::claim) of a key as sent in `scope` (whose namespace is `namespace`):
    /// the key this release derives for it and first, while previous keys are read, the one
    /// the previous key derivation gave it.
    pub(super) async fn claim_derived(
        &self,
        namespace: NamespaceRef<'_>,
        scope: &Scope,
        key: &str,
        fingerprint: &Fingerprint,
        in_flight: InFlightPolicy,
    ) -> Result<Decision<S>, StoreError> {
        let mechanism = scope.mechanism();
        let own = scope.storage_key_for(mechanism, key);
        let namespace = namespace.with_origin(Origin::current(Some(mechanism)));
        let previous = derivation::previous(mechanism, Tier::Engine)
            .filter(|_| self.inner.config.previous_keys);
        let Some((version, keyed_as)) = previous else {
            return self.claim_in(namespace, own, fingerprint, in_flight).await;
        };
        let previous_key = scope.storage_key_for(keyed_as, key);
        let under_previous = namespace.with_origin(Origin {
            mechanism: Some(mechanism),
            derivation: version,
        });
        let older = match self
            .claim_in(under_previous, previous_key, fingerprint, in_flight)
            .await?
        {
            Decision::Execute(older) => older,
            answered => return Ok(answered),
        };
        match self.claim_in(namespace, own, fingerprint, in_flight).await {
            Ok(Decision::Execute(mut execution)) => {
                execution.previous = Some(Box::new(older));
                Ok(Decision::Execute(execution))
            }
            // The key is another node's: give the previous one back at once.
            other => {
                let _ = older.release().await;
                other
            }
        }
    }
}
