//! The service [`TransactionalLayer`] wraps a handler in, and what a request it guards runs.

use std::sync::Arc;

use http::request::Parts;
use idempotency_core::StorageKey;
use idempotency_sql::TxStore;

use super::layer::TransactionalLayer;
use super::run;
use crate::guarded::{GatedFuture, Guard, GuardedService, Handler, ReadBody, StoredBody};
use crate::idempotency::config::Settings;

/// The middleware [`TransactionalLayer`] wraps a service in (see [`GuardedService`]): the
/// handler finds the request's transaction in its extensions ([`Tx`](super::Tx) takes it).
pub type TransactionalService<T, S> = GuardedService<T, TransactionalLayer<S>>;

impl<S: TxStore> Guard for TransactionalLayer<S> {
    fn settings(&self) -> &Settings {
        &self.shared.settings
    }

    fn run<T, B, ResB>(
        &self,
        inner: T,
        parts: Parts,
        body: B,
        header_key: Option<StorageKey>,
    ) -> GatedFuture<ResB, T::Error>
    where
        T: Handler<B, ResB>,
        B: ReadBody,
        ResB: StoredBody,
    {
        let shared = Arc::clone(&self.shared);
        Box::pin(run::run(shared, inner, parts, body, header_key))
    }
}
