//! What an `#[idempotent]` attribute's `store = …` may name.

use std::sync::Arc;

use idempotency_core::{Idempotency, Store};

/// What an `#[idempotent]` attribute's `store = …` expression may evaluate to: an
/// [`Idempotency`] engine, or a shared store (`Arc<S>`, wrapped in an engine with default
/// settings). References, `Arc<Idempotency<S>>` and statics reach it by auto-deref.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an idempotency engine",
    label = "`store = …` must be an `idempotency_core::Idempotency<S>` (or an `Arc` of a store, or a reference to either)"
)]
pub trait AsEngine {
    /// The store behind the engine.
    type Store: Store;
    /// An engine handle (cheap: two `Arc` clones).
    fn idempotency_engine(&self) -> Idempotency<Self::Store>;
}

impl<S: Store> AsEngine for Idempotency<S> {
    type Store = S;
    fn idempotency_engine(&self) -> Idempotency<S> {
        self.clone()
    }
}

impl<S: Store> AsEngine for Arc<S> {
    type Store = Arc<S>;
    fn idempotency_engine(&self) -> Idempotency<Arc<S>> {
        Idempotency::new(Arc::clone(self))
    }
}
