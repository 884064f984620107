//! The transactional layer and how it is built.

use std::sync::Arc;
use std::time::Duration;

use idempotency_sql::TxStore;
use tower_layer::Layer;

use crate::flights::{Claims, Flights};
use crate::guarded::GuardedService;
use crate::idempotency::IdempotencyLayerBuilder;
use crate::idempotency::config::{ScopeIsChosen, Settings, warn_if_shared_unverified};

/// Makes the wrapped handlers idempotent **inside their own database transaction**: the key is
/// claimed in the request's transaction, the handler does its business writes in it
/// ([`Tx`](super::Tx)), and the response is stored as the key's outcome in the same transaction,
/// which the layer then commits. See the [module docs](super) for what it answers when.
///
/// Built with [`IdempotencyLayerBuilder::build_transactional`] over a SQL store
/// ([`TxStore`]: `PostgresStore`, `MySqlStore`, `SqliteStore`), so it takes every setting of
/// the layer: key source, fingerprint, presets, verification, storage policy, in-flight policy,
/// limits, refusals. Cheap to clone.
pub struct TransactionalLayer<S> {
    pub(crate) shared: Arc<Shared<S>>,
}

/// What every service of a transactional layer shares.
pub(crate) struct Shared<S> {
    pub(crate) store: S,
    pub(crate) settings: Settings,
    pub(crate) lease: Duration,
    pub(crate) ttl: Duration,
    pub(crate) store_timeout: Duration,
    pub(crate) flights: Flights,
    pub(crate) claims: Claims,
    pub(crate) completed: idempotency_core::CompletedKeys,
}

impl<S> Clone for TransactionalLayer<S> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S> TransactionalLayer<S> {
    /// The tracker of the layer's background work (handlers of departed clients): wait for it
    /// on shutdown ([`Tracker::shutdown`](idempotency_core::background::Tracker::shutdown)).
    pub fn tracker(&self) -> &idempotency_core::background::Tracker {
        &self.shared.settings.detached.tracker
    }
}

impl<S> std::fmt::Debug for TransactionalLayer<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransactionalLayer")
            .field("settings", &self.shared.settings)
            .field("lease", &self.shared.lease)
            .field("ttl", &self.shared.ttl)
            .field("store_timeout", &self.shared.store_timeout)
            .finish_non_exhaustive()
    }
}

impl<S: TxStore, C> IdempotencyLayerBuilder<S, C> {
    /// The finished layer, claiming keys in each request's own transaction on the store's
    /// database ([`TransactionalLayer`]).
    ///
    /// The lease is how long a crashed process's record would block the key, were it committed
    /// (it never is without its outcome); the TTL and the store timeout are as for the layer.
    /// At most half the pool's connections wait on other transactions' claims at once
    /// ([`claim_permits`](Self::claim_permits)). Fail-open and lease renewal do not apply: the
    /// handler needs the database anyway, and an uncommitted claim holds while the transaction
    /// does. The request body is read whole first (within
    /// [`max_body_bytes`](Self::max_body_bytes) and [`body_read_timeout`](Self::body_read_timeout)),
    /// so no transaction waits on a slow client.
    pub fn build_transactional(mut self) -> TransactionalLayer<S>
    where
        C: ScopeIsChosen,
    {
        self.settings.prepare(self.engine.tracker());
        warn_if_shared_unverified(&self.settings);
        let config = self.engine.config();
        let store = self.engine.store().clone();
        let permits = self.claim_permits.unwrap_or_else(|| {
            usize::try_from(store.pool().options().get_max_connections() / 2).unwrap_or(1)
        });
        TransactionalLayer {
            shared: Arc::new(Shared {
                lease: config.lease,
                ttl: config.ttl,
                store_timeout: config.store_timeout,
                store,
                settings: self.settings,
                flights: Flights::default(),
                claims: Claims::new(permits),
                completed: idempotency_core::CompletedKeys::new(),
            }),
        }
    }
}

/// The layer's services are [`TransactionalService`](super::TransactionalService)s: the
/// guarded service, with the layer as its guard (`service`).
impl<S: TxStore, T> Layer<T> for TransactionalLayer<S> {
    type Service = GuardedService<T, Self>;

    fn layer(&self, inner: T) -> Self::Service {
        GuardedService::new(inner, self.clone())
    }
}
