//! What is derived from a layer's settings, checked and logged once, when the layer is built.

use std::sync::Arc;

use idempotency_core::Namespace;
use idempotency_core::background::Tracker;

use super::guarded_paths;
use super::settings::{LayerCounters, Settings};
use crate::detach::Detached;
use crate::fingerprint::FingerprintSource;
use crate::json::JsonPlan;

impl Settings {
    /// Prepares what is derived from the settings (the engine's namespace, the counters' keys);
    /// called once when the layer is built.
    ///
    /// # Panics
    ///
    /// If an `only_paths` entry cannot match any request (see [`guarded_paths`]).
    pub(crate) fn prepare(&mut self, tracker: &Tracker) {
        self.detached = Arc::new(Detached::new(tracker.clone()));
        #[cfg(feature = "grpc-descriptor")]
        if let Some(methods) = &self.grpc_methods {
            let paths = methods.guarded_paths(self.paths.as_deref(), self.scope.namespace());
            self.paths = Some(paths.into());
        }
        guarded_paths::check(self);
        guarded_paths::log(self);
        self.json = Arc::new(JsonPlan::new(
            self.key
                .json_pointer()
                .into_iter()
                .chain(self.key_status.as_deref())
                .chain(self.fingerprint.json_pointers())
                .chain(
                    self.previous_fingerprint
                        .iter()
                        .flat_map(FingerprintSource::json_pointers),
                ),
        ));
        let namespace = self.scope.namespace();
        self.counters = Arc::new(LayerCounters::new(namespace));
        self.scope = Namespace::new(namespace).scope();
    }
}

/// Logs, once per layer built, a layer whose keys are shared by callers nobody verifies.
pub(crate) fn warn_if_shared_unverified(settings: &Settings) {
    if settings.shared_unverified() {
        tracing::warn!(
            namespace = settings.scope.namespace(),
            "idempotency layer with a shared scope and no `verify`: every caller's key answers \
             for every other caller, so anyone who knows or guesses a key gets its stored \
             response; scope keys per principal unless all callers are trusted"
        );
    }
}
