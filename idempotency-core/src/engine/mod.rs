//! The engine: claim a key, keep its lease alive while work runs, store or release the outcome.
//! What it does when a store call fails at the wire is in [`recovery`]; how it claims the keys
//! of the previous key derivation beside its own after an upgrade, in [`previous_keys`].

mod config;
mod execution;
mod handle;
mod previous_keys;
mod recovery;
mod waiting;
mod waits;

use crate::namespace::NamespaceRef;
pub use config::{Config, DEFAULT_IN_FLIGHT_POLL, DEFAULT_MAX_WAITERS_PER_KEY};
pub use execution::Execution;
use execution::poll_once;
use handle::Engine;
pub use handle::Idempotency;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use crate::background::Tracker;
use crate::metrics::{DecisionLabel, StoreOp};
use crate::telemetry;
use crate::{
    Claim, ClaimId, ClaimKey, ClaimRequest, Fingerprint, InFlightPolicy, Outcome, Scope,
    StorageKey, Store, StoreError,
};

/// What to do with a request.
#[derive(Debug)]
pub enum Decision<S: Store> {
    /// Run the work, then [`Execution::complete`] or [`Execution::release`].
    Execute(Execution<S>),
    /// A duplicate of completed work: answer with this stored outcome.
    Replay(Outcome),
    /// A duplicate of work still running elsewhere.
    InFlight {
        /// A hint for when to retry.
        retry_after: Duration,
    },
    /// The key was used with another payload.
    Mismatch,
}

impl<S: Store> Idempotency<S> {
    /// An engine with the default [`Config`].
    pub fn new(store: S) -> Self {
        Self::with_config(store, Config::default())
    }

    /// An engine with the given settings.
    pub fn with_config(store: S, config: Config) -> Self {
        Self {
            inner: Arc::new(Engine {
                store: Arc::new(store),
                config,
                waits: Arc::default(),
                tracker: Tracker::new(),
            }),
        }
    }

    /// Hands the engine's background work (undos, retried completes and releases, reads for
    /// waiting duplicates) to `tracker`, which the application shares with its other engines
    /// and layers and waits for on shutdown ([`Tracker::shutdown`]). Each engine has a
    /// tracker of its own otherwise.
    pub fn with_tracker(mut self, tracker: Tracker) -> Self {
        Arc::make_mut(&mut self.inner).tracker = tracker;
        self
    }

    /// The tracker of the engine's background work.
    pub fn tracker(&self) -> &Tracker {
        &self.inner.tracker
    }

    fn map_config(mut self, change: impl FnOnce(&mut Config)) -> Self {
        change(&mut Arc::make_mut(&mut self.inner).config);
        self
    }

    /// Sets the processing lease (default 60 s).
    pub fn with_lease(self, lease: Duration) -> Self {
        self.map_config(|c| c.lease = lease)
    }

    /// Sets how long completed outcomes are kept (default 24 h).
    pub fn with_ttl(self, ttl: Duration) -> Self {
        self.map_config(|c| c.ttl = ttl)
    }

    /// Sets the timeout of each store call (default 2 s).
    pub fn with_store_timeout(self, timeout: Duration) -> Self {
        self.map_config(|c| c.store_timeout = timeout)
    }

    /// Turns lease renewal on or off, and sets its ceiling (default on, 10 min).
    pub fn with_keep_alive(self, enabled: bool, ceiling: Duration) -> Self {
        self.map_config(|c| {
            c.keep_alive = enabled;
            c.keep_alive_ceiling = ceiling;
        })
    }

    /// Also claims, first, the key the previous key derivation gave each claim whose
    /// derivation changed ([`Config::previous_keys`]): on while a fleet upgrades, and until
    /// the records the previous release wrote have expired (one TTL).
    pub fn with_previous_keys(self, enabled: bool) -> Self {
        self.map_config(|c| c.previous_keys = enabled)
    }

    /// Sets how many duplicates of one in-flight key may wait for it at once
    /// ([`Config::max_waiters_per_key`], default 128).
    pub fn with_max_waiters_per_key(self, max: usize) -> Self {
        self.map_config(|c| c.max_waiters_per_key = max)
    }

    /// Sets the longest pause between two reads of an in-flight key's record while duplicates
    /// wait for it ([`Config::in_flight_poll`], default 250 ms).
    pub fn with_in_flight_poll(self, poll: Duration) -> Self {
        self.map_config(|c| c.in_flight_poll = poll)
    }

    /// The settings in force.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.inner.store
    }

    /// The store, shared.
    pub fn shared_store(&self) -> Arc<S> {
        Arc::clone(&self.inner.store)
    }

    /// Claims `key` in `scope` for a request with `fingerprint`: the one way every front end
    /// claims. While another owner is in flight, `in_flight` answers [`Decision::InFlight`] at
    /// once ([`InFlightPolicy::Reject`]), or waits up to its bound and then answers with the
    /// first owner's outcome (or runs, if it was released). Duplicates of one key share one
    /// wait in an engine, bounded in number ([`Config::max_waiters_per_key`]).
    ///
    /// A key as sent ([`ClaimKey::Sent`]: a `&str` or an
    /// [`IdempotencyKey`](crate::IdempotencyKey)) is derived for the scope's front end
    /// ([`Scope::mechanism`]) and, while previous keys are read
    /// ([`with_previous_keys`](Self::with_previous_keys)), the previous key derivation's key is
    /// claimed first. A front end that claims in one namespace over and over prepares it once
    /// ([`Namespace::scope`](crate::Namespace::scope)); its metric keys are then built once.
    ///
    /// ```
    /// use idempotency_core::{Decision, Fingerprint, Idempotency, InFlightPolicy, MemoryStore, Namespace};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), idempotency_core::Error> {
    /// let engine = Idempotency::new(MemoryStore::new());
    /// let callbacks = Namespace::new("payments.callback"); // once, at start-up
    /// let scope = callbacks.scope().with_principal("merchant-7");
    /// let fingerprint = Fingerprint::of_bytes(b"order 42");
    /// let wait = InFlightPolicy::wait(Duration::from_secs(5));
    /// let decision = engine.claim(&scope, "T1", &fingerprint, wait).await?;
    /// assert!(matches!(decision, Decision::Execute(_)));
    /// # Ok(()) }
    /// ```
    pub async fn claim<'k>(
        &self,
        scope: &Scope,
        key: impl Into<ClaimKey<'k>>,
        fingerprint: &Fingerprint,
        in_flight: InFlightPolicy,
    ) -> Result<Decision<S>, StoreError> {
        let namespace = scope.prepared().by_ref();
        match key.into() {
            ClaimKey::Derived(key) => self.claim_in(namespace, key, fingerprint, in_flight).await,
            ClaimKey::Sent(key) => {
                self.claim_derived(namespace, scope, key, fingerprint, in_flight)
                    .await
            }
        }
    }

    async fn claim_in(
        &self,
        namespace: NamespaceRef<'_>,
        key: StorageKey,
        fingerprint: &Fingerprint,
        in_flight: InFlightPolicy,
    ) -> Result<Decision<S>, StoreError> {
        match in_flight {
            InFlightPolicy::Reject => self.claim_once(namespace, key, fingerprint).await,
            InFlightPolicy::Wait { max } => {
                self.claim_waiting(namespace, key, fingerprint, max).await
            }
        }
    }

    async fn claim_once(
        &self,
        namespace: NamespaceRef<'_>,
        key: StorageKey,
        fingerprint: &Fingerprint,
    ) -> Result<Decision<S>, StoreError> {
        let claim_id = ClaimId::random();
        let request = self.claim_request(namespace, &key, fingerprint, claim_id);
        // Until the store answers, the claim may have landed unanswered: if the call fails at
        // the wire or is dropped, the guard undoes it in the background.
        let mut unanswered = Unanswered {
            engine: self,
            namespace,
            key,
            claim_id,
            armed: true,
        };
        let call = std::pin::pin!(self.inner.store.claim(request));
        let claim = self.timed(StoreOp::Claim, namespace, call).await;
        if claim.is_err() {
            telemetry::record_key(&key);
        }
        unanswered.armed = matches!(&claim, Err(error) if error.is_transient());
        Ok(self.decide(namespace, key, claim?))
    }

    fn claim_request<'a>(
        &self,
        namespace: NamespaceRef<'a>,
        key: &'a StorageKey,
        fingerprint: &'a Fingerprint,
        claim_id: ClaimId,
    ) -> ClaimRequest<'a> {
        let origin = namespace.origin();
        ClaimRequest {
            key,
            namespace: namespace.as_str(),
            fingerprint,
            lease: self.inner.config.lease,
            claim_id,
            mechanism: origin.mechanism,
            key_derivation: Some(origin.derivation),
        }
    }

    /// What a store's answer to a claim means for the caller (logged and counted).
    fn decide(&self, namespace: NamespaceRef<'_>, key: StorageKey, claim: Claim) -> Decision<S> {
        let name = namespace.as_str();
        match claim {
            Claim::Acquired(lease) => {
                let label = if lease.took_over {
                    "takeover"
                } else {
                    "execute"
                };
                telemetry::record_decision(label, &key, Some(&lease));
                if lease.took_over {
                    tracing::warn!(namespace = name, key = %key, decision = "takeover", attempt = lease.attempt, fencing_token = lease.token.get(), "took over an expired lease");
                    namespace.count_decision(DecisionLabel::Takeover);
                } else {
                    tracing::debug!(namespace = name, key = %key, decision = "execute", attempt = lease.attempt, fencing_token = lease.token.get(), "claimed");
                    namespace.count_decision(DecisionLabel::Execute);
                }
                Decision::Execute(Execution::start(
                    self.clone(),
                    namespace.to_owned(),
                    key,
                    lease,
                ))
            }
            Claim::Completed(outcome) => {
                telemetry::record_decision("replay", &key, None);
                tracing::debug!(namespace = name, key = %key, decision = "replay", status = outcome.status, "replaying");
                namespace.count_decision(DecisionLabel::Replay);
                Decision::Replay(outcome)
            }
            Claim::InProgress { lease_remaining } => {
                telemetry::record_decision("in_flight", &key, None);
                tracing::debug!(namespace = name, key = %key, decision = "in_flight", "in flight");
                namespace.count_decision(DecisionLabel::InFlight);
                let retry_after =
                    lease_remaining.clamp(Duration::from_secs(1), Duration::from_secs(5));
                Decision::InFlight { retry_after }
            }
            Claim::Mismatch => {
                telemetry::record_decision("mismatch", &key, None);
                tracing::info!(namespace = name, key = %key, decision = "mismatch", "key reused with another payload");
                namespace.count_decision(DecisionLabel::Mismatch);
                Decision::Mismatch
            }
        }
    }

    /// Awaits a store call (pinned by the caller: a future passed by value into an `async fn`
    /// takes its room twice), or [`StoreError::Timeout`] once it has taken the store timeout;
    /// failures are logged and counted.
    ///
    /// Like `tokio::time::timeout`, except that a call done at its first poll (the memory
    /// store's, say) sets up no timer at all, and that the timer of one that is not starts after
    /// that first poll (which runs synchronously: no timer could interrupt it anyway). The timer
    /// is boxed, so that a call's future is no larger for it. A store that bounds its own calls
    /// within the store timeout ([`Store::call_bound`]: the Redis store) gets no second timer.
    async fn timed<T, F: Future<Output = Result<T, StoreError>>>(
        &self,
        op: StoreOp,
        namespace: NamespaceRef<'_>,
        mut call: Pin<&mut F>,
    ) -> Result<T, StoreError> {
        let result = match poll_once(call.as_mut()).await {
            Poll::Ready(result) => result,
            Poll::Pending => {
                let timeout = self.inner.config.store_timeout;
                match self.inner.store.call_bound() {
                    Some(bound) if bound <= timeout => call.await,
                    _ => match Box::pin(tokio::time::timeout(timeout, call)).await {
                        Ok(result) => result,
                        Err(_) => Err(StoreError::Timeout(timeout)),
                    },
                }
            }
        };
        if let Err(error) = &result {
            self.note_failure(op, namespace, error);
        }
        result
    }

    /// Logs and counts a failed store call.
    fn note_failure(&self, op: StoreOp, namespace: NamespaceRef<'_>, error: &StoreError) {
        let (name, op_name) = (namespace.as_str(), op.as_str());
        telemetry::record_error(error);
        if matches!(error, StoreError::LeaseLost) {
            namespace.count_stale_owner(op);
            tracing::warn!(
                namespace = name,
                op = op_name,
                "stale owner refused by fencing token"
            );
        } else {
            namespace.count_store_error(op);
            tracing::error!(namespace = name, op = op_name, %error, "idempotency store call failed");
        }
    }
}

/// A claim sent whose answer has not come: undone in the background when dropped armed (the
/// call failed at the wire, or its caller went away).
struct Unanswered<'a, S: Store> {
    engine: &'a Idempotency<S>,
    namespace: NamespaceRef<'a>,
    key: StorageKey,
    claim_id: ClaimId,
    armed: bool,
}

impl<S: Store> Drop for Unanswered<'_, S> {
    fn drop(&mut self) {
        if self.armed {
            recovery::undo_unanswered(
                self.engine.clone(),
                self.namespace.to_owned(),
                self.key,
                self.claim_id,
            );
        }
    }
}

#[cfg(all(test, feature = "memory"))]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::{IdempotencyKey, MemoryStore};

    #[tokio::test]
    async fn inline_keep_alive_holds_the_lease_while_work_runs() {
        let engine = Idempotency::new(MemoryStore::new())
            // A lease long enough that a loaded machine (CI beside other builds) renews it in
            // time: renewed every third of it.
            .with_lease(Duration::from_millis(500))
            .with_keep_alive(false, Duration::from_secs(60));
        let (scope, key) = (Scope::new("t"), IdempotencyKey::parse("k").unwrap());
        let fingerprint = Fingerprint::of_bytes(b"x");
        let Decision::Execute(execution) = engine
            .claim(&scope, &key, &fingerprint, InFlightPolicy::Reject)
            .await
            .unwrap()
        else {
            panic!("a new key runs");
        };
        let rival = engine.clone();
        let (scope2, key2) = (scope.clone(), key.clone());
        let work = async move {
            // Three leases later the key is still held: renewed inline.
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            rival
                .claim(&scope2, &key2, &fingerprint, InFlightPolicy::Reject)
                .await
                .unwrap()
        };
        let seen = execution.keep_alive_while(work).await;
        assert!(matches!(seen, Decision::InFlight { .. }), "{seen:?}");
        execution.complete(Outcome::new(200, "ok")).await.unwrap();
    }
}
