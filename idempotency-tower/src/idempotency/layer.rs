//! The layer, and what every service it makes shares.

use std::sync::Arc;

use idempotency_core::{Idempotency, Store};
use tower_layer::Layer;

use super::config::Settings;
use crate::guarded::GuardedService;

/// Makes the wrapped service idempotent: see the [crate docs](crate) for what it answers when.
///
/// Cheap to clone; every service it makes shares one engine (store, lease, TTL) and one set of
/// settings.
pub struct IdempotencyLayer<S> {
    /// One allocation, so that a clone (a few per guarded request) is one reference count.
    pub(crate) shared: Arc<Shared<S>>,
}

/// What every service of a layer shares.
pub(crate) struct Shared<S> {
    pub(crate) engine: Idempotency<S>,
    pub(crate) settings: Settings,
}

impl<S> Clone for IdempotencyLayer<S> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S> IdempotencyLayer<S> {
    pub(crate) fn new_shared(engine: Idempotency<S>, settings: Settings) -> Self {
        Self {
            shared: Arc::new(Shared { engine, settings }),
        }
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.shared.settings
    }
}

impl<S> std::fmt::Debug for IdempotencyLayer<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyLayer")
            .field("engine", &self.shared.engine)
            .field("settings", &self.shared.settings)
            .finish()
    }
}

impl<S: Store> IdempotencyLayer<S> {
    /// The engine. Its background keep-alive is off: the layer renews a running handler's lease
    /// while the handler runs ([`Execution::keep_alive_while`](idempotency_core::Execution::keep_alive_while)),
    /// as configured with
    /// [`IdempotencyLayerBuilder::keep_alive`](super::IdempotencyLayerBuilder::keep_alive).
    pub fn engine(&self) -> &Idempotency<S> {
        &self.shared.engine
    }

    /// The tracker of the layer's background work (its engine's): wait for it on shutdown
    /// ([`Tracker::shutdown`](idempotency_core::background::Tracker::shutdown)).
    pub fn tracker(&self) -> &idempotency_core::background::Tracker {
        self.shared.engine.tracker()
    }
}

/// The layer's services are [`IdempotencyService`](super::IdempotencyService)s: the guarded
/// service, with the layer as its guard (`service`).
impl<S: Store, T> Layer<T> for IdempotencyLayer<S> {
    type Service = GuardedService<T, Self>;

    fn layer(&self, inner: T) -> Self::Service {
        GuardedService::new(inner, self.clone())
    }
}
