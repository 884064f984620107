//! What a request a [`StepsLayer`] guards runs.

use std::sync::Arc;

use idempotency_steps::RunStore;

use super::layer::StepsLayer;
use super::run;
use crate::guarded::{Exchange, GatedFuture, Guard, Guarded};
use crate::idempotency::config::Settings;

impl<S: RunStore> Guard for StepsLayer<S> {
    fn settings(&self) -> &Settings {
        &self.shared.settings
    }

    fn run<X: Exchange>(&self, request: Guarded<X>) -> GatedFuture<X::Answer, X::Error> {
        Box::pin(run::run::<X, S>(
            Arc::clone(&self.shared),
            self.keep.clone(),
            request,
        ))
    }
}
