//! The service [`TransactionalLayer`] wraps a handler in, and what a request it guards runs.

use std::sync::Arc;

use idempotency_sql::TxStore;

use super::layer::TransactionalLayer;
use super::run;
use crate::guarded::{Exchange, GatedFuture, Guard, Guarded, GuardedService};
use crate::idempotency::config::Settings;

/// The middleware [`TransactionalLayer`] wraps a service in (see [`GuardedService`]): the
/// handler finds the request's transaction in its extensions ([`Tx`](super::Tx) takes it).
pub type TransactionalService<T, S> = GuardedService<T, TransactionalLayer<S>>;

impl<S: TxStore> Guard for TransactionalLayer<S> {
    fn settings(&self) -> &Settings {
        &self.shared.settings
    }

    fn run<X: Exchange>(&self, request: Guarded<X>) -> GatedFuture<X::Answer, X::Error> {
        Box::pin(run::run::<X, S>(Arc::clone(&self.shared), request))
    }
}
