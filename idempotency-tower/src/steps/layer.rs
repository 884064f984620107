//! The steps layer and how it is built.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use idempotency_sql::StepStore;
use idempotency_steps::Runner;
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
/// `MySqlStore`, `SqliteStore`), so it takes every setting of the layer: key source,
/// fingerprint, principal, storage policy, in-flight policy, limits, refusals. Cheap to clone.
pub struct StepsLayer<S> {
    pub(crate) shared: Arc<Shared<S>>,
    pub(crate) keep: Option<KeepInput>,
}

/// The middleware [`StepsLayer`] wraps a service in: the handler finds the request's run in its
/// extensions ([`Steps`](super::Steps) takes it).
pub type StepsService<T, S> = GuardedService<T, StepsLayer<S>>;

/// What every service of a steps layer shares.
pub(crate) struct Shared<S> {
    pub(crate) runner: Runner<S>,
    /// Duplicates in this process wait here, in memory, not on the database.
    pub(crate) flights: crate::transactional::flights::Flights,
    pub(crate) settings: Settings,
    pub(crate) store_timeout: Duration,
}

impl<S> Clone for StepsLayer<S> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            keep: self.keep.clone(),
        }
    }
}

impl<S: std::fmt::Debug> std::fmt::Debug for StepsLayer<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepsLayer")
            .field("runner", &self.shared.runner)
            .field("settings", &self.shared.settings)
            .finish_non_exhaustive()
    }
}

impl<S: StepStore> StepsLayer<S> {
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

impl<S: StepStore, C> IdempotencyLayerBuilder<S, C> {
    /// The finished layer, running each guarded request as a run with steps on the store's
    /// database ([`StepsLayer`]). The lease and TTL are the layer's; on PostgreSQL and MySQL a
    /// dead owner is noticed by its hold at once, so the lease only matters on SQLite and in
    /// operators' views.
    pub fn build_steps(mut self) -> StepsLayer<S>
    where
        C: ScopeIsChosen,
    {
        self.settings.prepare(self.engine.tracker());
        warn_if_shared_unverified(&self.settings);
        let config = self.engine.config();
        let runner = Runner::new(self.engine.store().clone())
            .with_lease(config.lease)
            .with_ttl(config.ttl);
        StepsLayer {
            shared: Arc::new(Shared {
                runner,
                flights: Default::default(),
                store_timeout: config.store_timeout,
                settings: self.settings,
            }),
            keep: None,
        }
    }
}

impl<S: StepStore, T> Layer<T> for StepsLayer<S> {
    type Service = StepsService<T, S>;

    fn layer(&self, inner: T) -> Self::Service {
        GuardedService::new(inner, self.clone())
    }
}
