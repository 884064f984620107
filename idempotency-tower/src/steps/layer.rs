//! The steps layer and how it is built.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use idempotency_core::Store;
#[cfg(feature = "sql")]
use idempotency_sql::StepStore;
use idempotency_steps::RunStore;
use idempotency_steps::leased::{self, Leased};
use tower_layer::Layer;

use super::input::KeepInput;
use crate::guarded::GuardedService;
use crate::idempotency::IdempotencyLayerBuilder;
use crate::idempotency::config::{ScopeIsChosen, Settings, warn_if_shared_unverified};

/// Makes the wrapped handlers **runs with steps**: each request's run is started or resumed
/// after its last checkpoint, the handler calls its steps through [`Steps`](super::Steps), and
/// the answer is stored when it answers. See the [module docs](super).
///
/// Built with [`IdempotencyLayerBuilder::build_steps`] over a SQL store (`PostgresStore`,
/// `MySqlStore`, `SqliteStore`: local and foreign steps), or with
/// [`IdempotencyLayerBuilder::build_leased_steps`] over any core store that keeps checkpoints
/// (Redis, Redis Cluster, Valkey, the memory store: foreign steps under a lease, `S` is then
/// [`Leased<S>`]), so it takes every setting of the layer: key source, fingerprint, principal,
/// storage policy, in-flight policy, limits, refusals. Cheap to clone.
pub struct StepsLayer<S: RunStore> {
    pub(crate) shared: Arc<Shared<S>>,
    pub(crate) keep: Option<KeepInput>,
}

/// The middleware [`StepsLayer`] wraps a service in: the handler finds the request's run in its
/// extensions ([`Steps`](super::Steps) takes it).
pub type StepsService<T, S> = GuardedService<T, StepsLayer<S>>;

/// What every service of a steps layer shares.
pub(crate) struct Shared<S: RunStore> {
    pub(crate) runner: S::Runner,
    /// Duplicates in this process wait here, in memory, not on the store.
    pub(crate) flights: crate::flights::Flights,
    pub(crate) settings: Settings,
    pub(crate) store_timeout: Duration,
}

impl<S: RunStore> Clone for StepsLayer<S> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            keep: self.keep.clone(),
        }
    }
}

impl<S: RunStore> std::fmt::Debug for StepsLayer<S>
where
    S::Runner: std::fmt::Debug,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepsLayer")
            .field("runner", &self.shared.runner)
            .field("settings", &self.shared.settings)
            .finish_non_exhaustive()
    }
}

impl<S: RunStore> StepsLayer<S> {
    /// Keeps only what `keep` leaves of each request body for a resume without the client
    /// (personal data taken out); the handler that the completer resumes gets that body.
    pub fn keep_input(mut self, keep: impl Fn(&Bytes) -> Bytes + Send + Sync + 'static) -> Self {
        self.keep = Some(Arc::new(keep));
        self
    }

    /// The namespace of the layer's runs.
    pub fn namespace(&self) -> &str {
        self.shared.settings.scope.namespace()
    }

    /// The tracker of the layer's background work (handlers of departed clients): wait for it
    /// on shutdown.
    pub fn tracker(&self) -> &idempotency_core::background::Tracker {
        &self.shared.settings.detached.tracker
    }
}

#[cfg(feature = "sql")]
impl<S: StepStore, C> IdempotencyLayerBuilder<S, C> {
    /// The finished layer, running each guarded request as a run with steps on the store's
    /// database ([`StepsLayer`]): local and foreign steps. The lease and TTL are the layer's;
    /// on PostgreSQL and MySQL a dead owner is noticed by its hold at once, so the lease only
    /// matters on SQLite and in operators' views.
    pub fn build_steps(self) -> StepsLayer<S>
    where
        C: ScopeIsChosen,
    {
        let config = self.engine.config();
        let runner = idempotency_steps::Runner::new(self.engine.store().clone())
            .with_lease(config.lease)
            .with_ttl(config.ttl);
        self.steps_layer(runner)
    }
}

impl<S: Store + Clone, C> IdempotencyLayerBuilder<S, C> {
    /// The finished layer, running each guarded request as a leased run with steps on a core
    /// store that keeps checkpoints (Redis, Redis Cluster, Valkey, the memory store in an
    /// `Arc`): foreign steps only, each run at least once with its downstream key and
    /// checkpointed as it returns ([`idempotency_steps::leased`]). The owner keeps its run by
    /// the layer's lease, renewed by each checkpoint and a heartbeat while a step runs; a dead
    /// owner's run is taken over when the lease ends. Handlers take `Steps<Leased<S>>`.
    pub fn build_leased_steps(self) -> StepsLayer<Leased<S>>
    where
        C: ScopeIsChosen,
        Leased<S>: RunStore<Runner = leased::Runner<S>>,
    {
        let config = self.engine.config();
        let runner = leased::Runner::new(self.engine.store().clone())
            .with_lease(config.lease)
            .with_ttl(config.ttl);
        self.steps_layer(runner)
    }
}

impl<S: Store, C> IdempotencyLayerBuilder<S, C> {
    /// The steps layer of this builder's settings, starting its runs with `runner`.
    fn steps_layer<R: RunStore>(mut self, runner: R::Runner) -> StepsLayer<R> {
        self.settings.prepare(self.engine.tracker());
        warn_if_shared_unverified(&self.settings);
        let store_timeout = self.engine.config().store_timeout;
        StepsLayer {
            shared: Arc::new(Shared {
                runner,
                flights: Default::default(),
                store_timeout,
                settings: self.settings,
            }),
            keep: None,
        }
    }
}

impl<S: RunStore, T> Layer<T> for StepsLayer<S> {
    type Service = StepsService<T, S>;

    fn layer(&self, inner: T) -> Self::Service {
        GuardedService::new(inner, self.clone())
    }
}
