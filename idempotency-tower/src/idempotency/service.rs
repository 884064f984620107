//! The service [`IdempotencyLayer`] wraps a handler in, and what a request it guards runs.

use idempotency_core::Store;

use super::config::Settings;
use super::gate;
use super::layer::IdempotencyLayer;
use crate::guarded::{Exchange, GatedFuture, Guard, Guarded, GuardedService};

/// The middleware [`IdempotencyLayer`] wraps a service in (see [`GuardedService`]).
pub type IdempotencyService<T, S> = GuardedService<T, IdempotencyLayer<S>>;

impl<S: Store> Guard for IdempotencyLayer<S> {
    fn settings(&self) -> &Settings {
        IdempotencyLayer::settings(self)
    }

    fn run<X: Exchange>(&self, request: Guarded<X>) -> GatedFuture<X::Answer, X::Error> {
        Box::pin(gate::run::<X, S>(self.clone(), request))
    }
}
