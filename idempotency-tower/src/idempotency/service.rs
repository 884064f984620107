//! The service [`IdempotencyLayer`] wraps a handler in, and what a request it guards runs.

use http::request::Parts;
use idempotency_core::{StorageKey, Store};

use super::config::Settings;
use super::gate;
use super::layer::IdempotencyLayer;
use crate::guarded::{GatedFuture, Guard, GuardedService, Handler, ReadBody, StoredBody};

/// The middleware [`IdempotencyLayer`] wraps a service in (see [`GuardedService`]).
pub type IdempotencyService<T, S> = GuardedService<T, IdempotencyLayer<S>>;

impl<S: Store> Guard for IdempotencyLayer<S> {
    fn settings(&self) -> &Settings {
        IdempotencyLayer::settings(self)
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
        Box::pin(gate::run(self.clone(), inner, parts, body, header_key))
    }
}
