//! Shared helpers of the broker tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

#[cfg(feature = "rabbitmq")]
pub(crate) mod amqp;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idempotency_queue::Job;

/// A name no other test run uses.
pub(crate) fn unique(prefix: &str) -> String {
    let mut bytes = [0u8; 6];
    getrandom::fill(&mut bytes).unwrap();
    format!("{prefix}-{}", hex::encode(bytes))
}

/// Polls `done` until it holds, failing the test after `limit`.
pub(crate) async fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Completed handler runs per business key.
#[derive(Clone, Default)]
pub(crate) struct Ledger(Arc<Mutex<HashMap<String, usize>>>);

impl Ledger {
    pub(crate) fn record(&self, job: &Job) {
        *self
            .0
            .lock()
            .unwrap()
            .entry(job.key.to_string())
            .or_default() += 1;
    }

    pub(crate) fn runs(&self, key: &str) -> usize {
        self.0.lock().unwrap().get(key).copied().unwrap_or(0)
    }

    pub(crate) fn total(&self) -> usize {
        self.0.lock().unwrap().values().sum()
    }

    pub(crate) fn keys(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}
