//! The engine: claim a key, keep its lease alive while work runs, store or release the outcome.
//! What it does when a store call fails at the wire is in [`recovery`]; how it claims the keys
//! of the previous key derivation beside its own after an upgrade, in [`previous_keys`].

mod previous_keys;
mod recovery;
mod waits;

pub use waits::{DEFAULT_IN_FLIGHT_POLL, DEFAULT_MAX_WAITERS_PER_KEY};

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use crate::background::Tracker;
use crate::derivation::Origin;
use crate::metrics::{DecisionLabel, NamespaceCounters, StoreOp, adhoc};
use crate::telemetry;
use crate::{
    Claim, ClaimId, ClaimRequest, FencingToken, Fingerprint, IdempotencyKey, InFlightPolicy, Lease,
    Mechanism, Outcome, Scope, StorageKey, Store, StoreError,
};

/// Engine settings. Every default can be changed with the `with_*` methods of [`Idempotency`].
#[derive(Clone, Debug)]
pub struct Config {
    /// How long a claim holds before a crashed owner may be taken over. Default 60 s.
    pub lease: Duration,
    /// How long a completed outcome is kept and replayed. Default 24 h.
    pub ttl: Duration,
    /// Whether a running execution renews its lease. Default on.
    pub keep_alive: bool,
    /// The longest a lease is renewed for one execution. Default 10 min.
    pub keep_alive_ceiling: Duration,
    /// The longest any single store call may take before it counts as failed. Default 2 s.
    pub store_timeout: Duration,
    /// Whether claims whose key derivation changed in this release (functions, [`Call`],
    /// `#[idempotent]`; consumers, [`Idempotency::claim_key`]) also claim, first, the key the
    /// previous derivation gave them, so that a fleet running the previous release and this
    /// one side by side never runs one twice, and records the previous release wrote are
    /// replayed. On for one TTL after such an upgrade (see [`Mechanism`]). Default off.
    ///
    /// [`Call`]: crate::function::Call
    pub previous_keys: bool,
    /// How many duplicates of one in-flight key may wait for it at once in this engine
    /// ([`InFlightPolicy::Wait`]); more are answered in flight at once. They share one wait:
    /// one read of the record per tick, however many they are. Default
    /// [`DEFAULT_MAX_WAITERS_PER_KEY`] (128).
    pub max_waiters_per_key: usize,
    /// The longest pause between two reads of an in-flight key's record while duplicates wait
    /// for it (the first comes after 1/32 of it, then doubling). An owner of the same engine
    /// that finishes has it read at once. Default [`DEFAULT_IN_FLIGHT_POLL`] (250 ms).
    pub in_flight_poll: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(60),
            ttl: Duration::from_secs(24 * 60 * 60),
            keep_alive: true,
            keep_alive_ceiling: Duration::from_secs(600),
            store_timeout: Duration::from_secs(2),
            previous_keys: false,
            max_waiters_per_key: DEFAULT_MAX_WAITERS_PER_KEY,
            in_flight_poll: DEFAULT_IN_FLIGHT_POLL,
        }
    }
}

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

/// A namespace prepared once for the engine: its name and its metric keys, built when it is
/// created rather than on every request. Cheap to clone (one reference count).
///
/// A front end keeps one per namespace it serves and claims with [`Idempotency::claim`];
/// [`Idempotency::begin`] takes the namespace from a [`Scope`] and counts the same metrics.
#[derive(Clone)]
pub struct Namespace(NamespaceRepr);

#[derive(Clone)]
enum NamespaceRepr {
    /// Built by [`Namespace::new`]: counters ready.
    Prepared(Arc<PreparedNamespace>),
    /// Taken from a `&str` for one execution: counters built per event.
    Adhoc(Arc<str>),
}

struct PreparedNamespace {
    name: Box<str>,
    counters: NamespaceCounters,
    /// The front end claiming in it, kept with the records it writes.
    mechanism: Mechanism,
}

impl Namespace {
    /// Prepares `name` for requests (HTTP, gRPC, direct engine calls:
    /// [`Mechanism::Request`], whose keys [`Scope::storage_key`] derives).
    pub fn new(name: &str) -> Self {
        Self::for_mechanism(Mechanism::Request, name)
    }

    /// Prepares `name` for the front end of `mechanism`: the records it writes say so
    /// ([`Record::mechanism`](crate::Record::mechanism)).
    pub fn for_mechanism(mechanism: Mechanism, name: &str) -> Self {
        Self(NamespaceRepr::Prepared(Arc::new(PreparedNamespace {
            name: name.into(),
            counters: NamespaceCounters::new(name),
            mechanism,
        })))
    }

    /// The front end it was prepared for ([`Namespace::for_mechanism`]).
    pub fn mechanism(&self) -> Mechanism {
        match &self.0 {
            NamespaceRepr::Prepared(prepared) => prepared.mechanism,
            NamespaceRepr::Adhoc(_) => Mechanism::Request,
        }
    }

    /// The namespace's name.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            NamespaceRepr::Prepared(prepared) => &prepared.name,
            NamespaceRepr::Adhoc(name) => name,
        }
    }

    fn by_ref(&self) -> NamespaceRef<'_> {
        match &self.0 {
            NamespaceRepr::Prepared(prepared) => {
                NamespaceRef::Prepared(self, prepared, Origin::current(Some(prepared.mechanism)))
            }
            NamespaceRepr::Adhoc(name) => NamespaceRef::Name(name, Origin::current(None)),
        }
    }
}

impl std::fmt::Debug for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Namespace").field(&self.as_str()).finish()
    }
}

impl std::fmt::Display for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A namespace as one call sees it: prepared, or a name only; with the origin of the keys
/// it claims (kept with the records they write).
#[derive(Clone, Copy)]
enum NamespaceRef<'a> {
    Prepared(&'a Namespace, &'a PreparedNamespace, Origin),
    Name(&'a str, Origin),
}

impl<'a> NamespaceRef<'a> {
    fn as_str(self) -> &'a str {
        match self {
            Self::Prepared(_, prepared, _) => &prepared.name,
            Self::Name(name, _) => name,
        }
    }

    fn origin(self) -> Origin {
        match self {
            Self::Prepared(_, _, origin) | Self::Name(_, origin) => origin,
        }
    }

    /// The same namespace, claiming keys of `origin`.
    fn with_origin(self, origin: Origin) -> Self {
        match self {
            Self::Prepared(namespace, prepared, _) => Self::Prepared(namespace, prepared, origin),
            Self::Name(name, _) => Self::Name(name, origin),
        }
    }

    fn to_owned(self) -> Namespace {
        match self {
            Self::Prepared(namespace, _, _) => namespace.clone(),
            Self::Name(name, _) => Namespace(NamespaceRepr::Adhoc(Arc::from(name))),
        }
    }

    fn count_decision(self, decision: DecisionLabel) {
        match self {
            Self::Prepared(_, prepared, _) => prepared.counters.decision(decision),
            Self::Name(name, _) => adhoc::decision(name, decision),
        }
    }

    fn count_released(self) {
        match self {
            Self::Prepared(_, prepared, _) => prepared.counters.released(),
            Self::Name(name, _) => adhoc::released(name),
        }
    }

    fn count_store_error(self, op: StoreOp) {
        match self {
            Self::Prepared(_, prepared, _) => prepared.counters.store_error(op),
            Self::Name(name, _) => adhoc::store_error(name, op),
        }
    }

    fn count_stale_owner(self, op: StoreOp) {
        match self {
            Self::Prepared(_, prepared, _) => prepared.counters.stale_owner(op),
            Self::Name(name, _) => adhoc::stale_owner(name, op),
        }
    }
}

/// The idempotency engine over a store. Cheap to clone.
///
/// See the crate docs for a complete example.
pub struct Idempotency<S> {
    /// One allocation, so that a clone (one per claim and per execution) is one reference
    /// count, not two.
    inner: Arc<Engine<S>>,
}

struct Engine<S> {
    store: Arc<S>,
    config: Config,
    /// The duplicates waiting for in-flight keys, one flight per key.
    waits: Arc<waits::Waits>,
    /// The work that goes on after its caller has its answer.
    tracker: Tracker,
}

impl<S> Clone for Engine<S> {
    fn clone(&self) -> Self {
        Self {
            store: Arc::clone(&self.store),
            config: self.config.clone(),
            waits: Arc::clone(&self.waits),
            tracker: self.tracker.clone(),
        }
    }
}

impl<S> Clone for Idempotency<S> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<S> std::fmt::Debug for Idempotency<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Idempotency")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
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

    /// Claims `key` in `scope` for a request with `fingerprint` (the hashed key
    /// [`Scope::storage_key`]); a duplicate in flight is answered at once. Shorthand for
    /// [`claim`](Self::claim) with [`InFlightPolicy::Reject`].
    pub async fn begin(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
    ) -> Result<Decision<S>, StoreError> {
        let origin = Origin::current(Some(Mechanism::Request));
        let namespace = NamespaceRef::Name(scope.namespace(), origin);
        self.claim_once(namespace, scope.storage_key(key), fingerprint)
            .await
    }

    /// Claims a hashed key (see [`Scope::storage_key_for`]) in a prepared [`Namespace`]: the
    /// entry point of every front end. While another owner is in flight, `in_flight` answers
    /// [`Decision::InFlight`] at once ([`InFlightPolicy::Reject`]), or waits up to its bound and
    /// then answers with the first owner's outcome (or runs, if it was released). Duplicates of
    /// one key share one wait in an engine, bounded in number ([`Config::max_waiters_per_key`]).
    ///
    /// ```
    /// use idempotency_core::{Decision, Fingerprint, Idempotency, InFlightPolicy, MemoryStore, Namespace, Scope};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), idempotency_core::Error> {
    /// let engine = Idempotency::new(MemoryStore::new());
    /// let namespace = Namespace::new("payments.callback"); // once, at start-up
    /// let key = Scope::new("payments.callback").storage_key_for(idempotency_core::Mechanism::Request, "T1");
    /// let wait = InFlightPolicy::wait(Duration::from_secs(5));
    /// let decision = engine.claim(&namespace, key, &Fingerprint::of_bytes(b"order 42"), wait).await?;
    /// assert!(matches!(decision, Decision::Execute(_)));
    /// # Ok(()) }
    /// ```
    pub async fn claim(
        &self,
        namespace: &Namespace,
        key: StorageKey,
        fingerprint: &Fingerprint,
        in_flight: InFlightPolicy,
    ) -> Result<Decision<S>, StoreError> {
        self.claim_in(namespace.by_ref(), key, fingerprint, in_flight)
            .await
    }

    /// [`claim`](Self::claim) answered at once, for a front end that would otherwise box the
    /// claim's future: `Some` if the store answers without awaiting ([`Store::claim_ready`],
    /// the memory store), `None` otherwise (then await `claim`). A duplicate in flight is
    /// answered at once: a front end that waits for it awaits `claim` then.
    pub fn claim_at_once(
        &self,
        namespace: &Namespace,
        key: StorageKey,
        fingerprint: &Fingerprint,
    ) -> Option<Result<Decision<S>, StoreError>> {
        let namespace = namespace.by_ref();
        let request = self.claim_request(namespace, &key, fingerprint, ClaimId::random());
        let claim = self.inner.store.claim_ready(request)?;
        if let Err(error) = &claim {
            telemetry::record_key(&key);
            self.note_failure(StoreOp::Claim, namespace, error);
        }
        Some(claim.map(|claim| self.decide(namespace, key, claim)))
    }

    /// [`claim_key`](Self::claim_key) of `mechanism` in the namespace of `scope`, given by
    /// name (counters built per event): for front ends that claim in a namespace once per
    /// call, as [`Call`](crate::function::Call).
    pub(crate) async fn claim_named(
        &self,
        scope: &Scope,
        mechanism: Mechanism,
        key: &str,
        fingerprint: &Fingerprint,
        in_flight: InFlightPolicy,
    ) -> Result<Decision<S>, StoreError> {
        let namespace = NamespaceRef::Name(scope.namespace(), Origin::current(Some(mechanism)));
        self.claim_derived(namespace, mechanism, scope, key, fingerprint, in_flight)
            .await
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

/// The right to run the work for a claimed key, with its lease renewed in the background.
///
/// Finish with [`complete`](Self::complete) (store the outcome for replay) or
/// [`release`](Self::release) (let a retry run again). Dropping it unfinished releases the key
/// in the background.
pub struct Execution<S: Store> {
    engine: Idempotency<S>,
    namespace: Namespace,
    key: StorageKey,
    lease: Lease,
    keep_alive: Option<JoinHandle<()>>,
    finished: bool,
    /// The same call's claim of the key the previous derivation gave it
    /// ([`Config::previous_keys`]): completed first (nodes of the previous release look only
    /// there) and released with this one.
    previous: Option<Box<Execution<S>>>,
}

impl<S: Store> std::fmt::Debug for Execution<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Execution")
            .field("namespace", &self.namespace)
            .field("key", &self.key)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl<S: Store> Execution<S> {
    fn start(engine: Idempotency<S>, namespace: Namespace, key: StorageKey, lease: Lease) -> Self {
        let keep_alive = engine
            .inner
            .config
            .keep_alive
            .then(|| spawn_keep_alive(engine.clone(), namespace.clone(), key, lease.token));
        Self {
            engine,
            namespace,
            key,
            lease,
            keep_alive,
            finished: false,
            previous: None,
        }
    }

    /// The fencing token of this owner.
    pub fn token(&self) -> FencingToken {
        self.lease.token
    }

    /// The lease as claimed (attempt number, whether it was a takeover).
    pub fn lease(&self) -> Lease {
        self.lease
    }

    /// The hashed key.
    pub fn key(&self) -> &StorageKey {
        &self.key
    }

    /// The namespace the key was claimed in.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// Stores `outcome` for replay. Fails with [`StoreError::LeaseLost`] if another owner took
    /// the key over meanwhile (the outcome is then not stored). A transient failure (a timeout,
    /// a lost connection) is returned, and the complete retried in the background meanwhile,
    /// the lease renewed, until it lands or the lease ends.
    ///
    /// (An `async` block rather than an `async fn`: the execution and the outcome are then kept
    /// once in the future, not twice.)
    #[allow(clippy::manual_async_fn)] // an `async fn` would keep `self` and `outcome` twice
    pub fn complete(mut self, outcome: Outcome) -> impl Future<Output = Result<(), StoreError>> {
        async move {
            if let Some(twin) = self.previous.take() {
                // Logged and retried by the twin itself; this key is completed whatever it says.
                let _ = Box::pin(twin.complete(outcome.clone())).await;
            }
            self.stop_keep_alive();
            self.finished = true;
            let engine = &self.engine;
            let ttl = engine.inner.config.ttl;
            let store = &engine.inner.store;
            let result = {
                let call =
                    std::pin::pin!(store.complete(&self.key, self.lease.token, &outcome, ttl));
                engine
                    .timed(StoreOp::Complete, self.namespace.by_ref(), call)
                    .await
            };
            engine.inner.waits.wake(&self.key);
            if matches!(&result, Err(error) if error.is_transient()) {
                self.finish_later(recovery::Finish::Complete(outcome), true);
            }
            if result.is_ok() {
                telemetry::record_current(telemetry::FINISH, "completed");
            }
            result
        }
    }

    /// Deletes the claim so that a retry runs the work again. A transient failure is returned,
    /// and the release retried in the background meanwhile.
    #[allow(clippy::manual_async_fn)] // an `async fn` would keep `self` twice
    pub fn release(mut self) -> impl Future<Output = Result<(), StoreError>> {
        async move {
            if let Some(twin) = self.previous.take() {
                let _ = Box::pin(twin.release()).await;
            }
            self.stop_keep_alive();
            self.finished = true;
            self.namespace.by_ref().count_released();
            let engine = &self.engine;
            let result = {
                let call = std::pin::pin!(engine.inner.store.release(&self.key, self.lease.token));
                engine
                    .timed(StoreOp::Release, self.namespace.by_ref(), call)
                    .await
            };
            engine.inner.waits.wake(&self.key);
            if matches!(&result, Err(error) if error.is_transient()) {
                self.finish_later(recovery::Finish::Release, true);
            }
            if result.is_ok() {
                telemetry::record_current(telemetry::FINISH, "released");
            }
            result
        }
    }

    /// Hands `finish` to the background ([`recovery::retry_finish`]).
    fn finish_later(&self, finish: recovery::Finish, failed_before: bool) {
        recovery::retry_finish(
            self.engine.clone(),
            self.namespace.clone(),
            self.key,
            self.lease,
            finish,
            failed_before,
        );
    }

    /// Runs `work` to its end while renewing the lease every `lease / 3` (up to the keep-alive
    /// ceiling) from the caller's own task: the inline twin of the background keep-alive, for a
    /// caller that already drives the work and wants no second task per execution (build its
    /// engine with `with_keep_alive(false, ceiling)`). Renewal stops, and the work goes on, once
    /// the ceiling is reached or the lease was lost. Work that is done at its first poll sets up
    /// no timer. Pass a pinned reference (`work.as_mut()`) to keep a large future in place.
    pub async fn keep_alive_while<F: Future>(&self, work: F) -> F::Output {
        let mut work = std::pin::pin!(work);
        // Work done at its first poll needs no renewal, and no timer; the renewal loop (timers,
        // touch calls) is boxed so that it costs neither space nor time to work that is.
        if let Poll::Ready(output) = poll_once(work.as_mut()).await {
            return output;
        }
        Box::pin(self.renew_while(work)).await
    }

    async fn renew_while<F: Future>(&self, mut work: Pin<&mut F>) -> F::Output {
        let config = &self.engine.inner.config;
        let period = (config.lease / 3).max(Duration::from_millis(10));
        let until = Instant::now() + config.keep_alive_ceiling;
        loop {
            if let Either::Left(output) = race(work.as_mut(), tokio::time::sleep(period)).await {
                return output;
            }
            if Instant::now() >= until {
                tracing::warn!(namespace = %self.namespace, key = %self.key, "keep-alive ceiling reached; the lease may be taken over");
                return work.await;
            }
            let call = std::pin::pin!(self.engine.inner.store.touch(
                &self.key,
                self.lease.token,
                config.lease
            ));
            let touch = self
                .engine
                .timed(StoreOp::Touch, self.namespace.by_ref(), call);
            match race(work.as_mut(), touch).await {
                Either::Left(output) => return output,
                Either::Right(Err(StoreError::LeaseLost)) => return work.await,
                Either::Right(_) => {}
            }
        }
    }

    fn stop_keep_alive(&mut self) {
        if let Some(task) = self.keep_alive.take() {
            task.abort();
        }
    }
}

/// Polls `future` once: its output, or `Pending` (its waker registered).
async fn poll_once<F: Future>(future: Pin<&mut F>) -> Poll<F::Output> {
    let mut future = future;
    std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await
}

enum Either<A, B> {
    Left(A),
    Right(B),
}

/// Polls `first` and `second` together; the first to finish wins (`first` is kept, `second`
/// dropped).
async fn race<A: Future, B: Future>(
    mut first: std::pin::Pin<&mut A>,
    second: B,
) -> Either<A::Output, B::Output> {
    let mut second = std::pin::pin!(second);
    std::future::poll_fn(|cx| {
        if let std::task::Poll::Ready(output) = first.as_mut().poll(cx) {
            return std::task::Poll::Ready(Either::Left(output));
        }
        second.as_mut().poll(cx).map(Either::Right)
    })
    .await
}

impl<S: Store> Drop for Execution<S> {
    fn drop(&mut self) {
        self.stop_keep_alive();
        if self.finished {
            return;
        }
        tracing::warn!(namespace = %self.namespace, key = %self.key, "execution dropped unfinished; releasing the key");
        self.finish_later(recovery::Finish::Release, false);
    }
}

fn spawn_keep_alive<S: Store>(
    engine: Idempotency<S>,
    namespace: Namespace,
    key: StorageKey,
    token: FencingToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let config = &engine.inner.config;
        let period = (config.lease / 3).max(Duration::from_millis(10));
        let until = Instant::now() + config.keep_alive_ceiling;
        loop {
            tokio::time::sleep(period).await;
            if Instant::now() >= until {
                tracing::warn!(namespace = %namespace, key = %key, "keep-alive ceiling reached; the lease may be taken over");
                return;
            }
            let call = std::pin::pin!(engine.inner.store.touch(&key, token, config.lease));
            let touched = engine.timed(StoreOp::Touch, namespace.by_ref(), call).await;
            if let Err(StoreError::LeaseLost) = touched {
                return;
            }
        }
    })
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
        let Decision::Execute(execution) = engine.begin(&scope, &key, &fingerprint).await.unwrap()
        else {
            panic!("a new key runs");
        };
        let rival = engine.clone();
        let (scope2, key2) = (scope.clone(), key.clone());
        let work = async move {
            // Three leases later the key is still held: renewed inline.
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            rival.begin(&scope2, &key2, &fingerprint).await.unwrap()
        };
        let seen = execution.keep_alive_while(work).await;
        assert!(matches!(seen, Decision::InFlight { .. }), "{seen:?}");
        execution.complete(Outcome::new(200, "ok")).await.unwrap();
    }
}
