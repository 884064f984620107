//! One call of an idempotent function: what it is keyed, scoped and fingerprinted by.

use std::fmt::Display;
use std::time::Duration;

use serde::Serialize;

use idempotency_core::{
    Decision, Error, Fingerprint, FingerprintBuilder, Idempotency, InFlightPolicy, KeyError,
    Mechanism, Scope, StorageKey, Store, canonical_json,
};

/// One call of an idempotent function: its scope, key, fingerprint and settings.
pub struct Call {
    scope: Scope,
    key: String,
    fingerprint: FingerprintBuilder,
    ttl: Option<Duration>,
    lease: Option<Duration>,
    in_flight: InFlightPolicy,
    error: Option<Error>,
}

impl std::fmt::Debug for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call")
            .field("namespace", &self.scope.namespace())
            .field("ttl", &self.ttl)
            .field("lease", &self.lease)
            .field("in_flight", &self.in_flight)
            .finish_non_exhaustive()
    }
}

impl Call {
    /// A call keyed by `key` (any `Display`: the text is hashed, so it need not be an HTTP-legal
    /// key; only an empty key is refused) in the namespace `namespace`.
    pub fn new(namespace: &str, key: impl Display) -> Self {
        Self {
            scope: Scope::for_mechanism(Mechanism::Function, namespace),
            key: key.to_string(),
            fingerprint: Fingerprint::builder(),
            ttl: None,
            lease: None,
            in_flight: InFlightPolicy::Reject,
            error: None,
        }
    }

    /// Restricts the scope to one principal (tenant, user): two principals never share a record.
    pub fn principal(mut self, principal: impl Display) -> Self {
        self.scope = self.scope.with_principal(principal.to_string());
        self
    }

    /// Adds an argument to the fingerprint, as canonical JSON under `name`.
    pub fn fingerprint(mut self, name: &str, value: &impl Serialize) -> Self {
        match serde_json::to_value(value) {
            Ok(json) => {
                let text = canonical_json(&json);
                self.fingerprint.field(name.as_bytes(), text.as_bytes());
            }
            Err(error) => {
                self.error.get_or_insert(Error::Codec(
                    format!("fingerprint argument `{name}`: {error}").into(),
                ));
            }
        }
        self
    }

    /// How long a completed result is replayed (default: the engine's TTL).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// How long a claim holds before a crashed owner is taken over (default: the engine's lease).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// What a duplicate gets while the first call with its key runs (default
    /// [`InFlightPolicy::Reject`]: [`Error::InFlight`] at once).
    pub fn in_flight(mut self, policy: InFlightPolicy) -> Self {
        self.in_flight = policy;
        self
    }

    /// While a duplicate is in flight, wait up to `max_wait` for its result instead of failing
    /// with [`Error::InFlight`]: [`in_flight`](Self::in_flight)`(InFlightPolicy::wait(max_wait))`.
    pub fn wait(self, max_wait: Duration) -> Self {
        self.in_flight(InFlightPolicy::wait(max_wait))
    }

    /// The scope.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The hashed key the record is stored under ([`Mechanism::Function`]: never the key of an
    /// HTTP request, a consumer or a hand-written transaction in the same scope).
    pub fn storage_key(&self) -> StorageKey {
        self.scope.storage_key_for(Mechanism::Function, &self.key)
    }

    fn engine<S: Store>(&self, engine: Idempotency<S>) -> Idempotency<S> {
        let engine = match self.ttl {
            Some(ttl) => engine.with_ttl(ttl),
            None => engine,
        };
        match self.lease {
            Some(lease) => engine.with_lease(lease),
            None => engine,
        }
    }

    /// Claims the key: the first step of [`run`](crate::run), public for hand-written variants.
    pub async fn begin<S: Store>(self, engine: Idempotency<S>) -> Result<Decision<S>, Error> {
        let engine = self.engine(engine);
        let in_flight = self.in_flight;
        let (scope, key, fingerprint) = self.into_parts()?;
        engine.claim(&scope, &key, &fingerprint, in_flight).await
    }

    /// The call's scope, key and fingerprint, or the error met while building it (an empty
    /// key, a fingerprint part that does not serialize): what a runtime that claims elsewhere
    /// than through an engine (the SQL stores' transactions) claims with.
    pub fn into_parts(mut self) -> Result<(Scope, String, Fingerprint), Error> {
        if let Some(error) = self.error {
            return Err(error);
        }
        if self.key.is_empty() {
            return Err(KeyError::Empty.into());
        }
        Ok((self.scope, self.key, self.fingerprint.finish()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idempotency_core::IdempotencyKey;

    #[test]
    fn storage_keys_are_the_function_mechanisms() {
        let call = Call::new("ns", "order-42").principal("tenant");
        let key = IdempotencyKey::parse("order-42").unwrap();
        let scope = Scope::new("ns").with_principal("tenant");
        // A function's record never answers an HTTP request in the same scope.
        assert_ne!(call.storage_key(), scope.storage_key(&key));
        assert_eq!(
            call.storage_key(),
            scope.storage_key_for(Mechanism::Function, "order-42")
        );
        // Keys an HTTP header would refuse are still usable by functions.
        assert_ne!(Call::new("ns", "订单 42").storage_key(), call.storage_key());
    }
}
