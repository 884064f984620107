//! The engine's handle: one shared allocation with its store, settings, waits and tracker.

use std::sync::Arc;

use super::config::Config;
use super::waits::Waits;
use crate::background::Tracker;

/// The idempotency engine over a store. Cheap to clone.
///
/// See the crate docs for a complete example.
pub struct Idempotency<S> {
    /// One allocation, so that a clone (one per claim and per execution) is one reference
    /// count, not two.
    pub(super) inner: Arc<Engine<S>>,
}

pub(super) struct Engine<S> {
    pub(super) store: Arc<S>,
    pub(super) config: Config,
    /// The duplicates waiting for in-flight keys, one flight per key.
    pub(super) waits: Arc<Waits>,
    /// The work that goes on after its caller has its answer.
    pub(super) tracker: Tracker,
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
