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

/// A consumer on a fresh memory store whose handler records its start in the ledger, then waits
/// for a permit of the gate (which has none until the test adds them): deliveries stay in hand
/// as long as the test wants. With its ledger and gate.
pub(crate) fn gated_consumer() -> (
    Arc<
        idempotency_queue::IdempotentConsumer<
            idempotency_core::MemoryStore,
            idempotency_queue::Header,
            impl idempotency_queue::Handler,
        >,
    >,
    Ledger,
    Arc<tokio::sync::Semaphore>,
) {
    let ledger = Ledger::default();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (started, held) = (ledger.clone(), Arc::clone(&gate));
    let consumer = idempotency_queue::IdempotentConsumer::new(
        idempotency_core::Idempotency::new(idempotency_core::MemoryStore::new()),
        idempotency_core::Scope::new(unique("coupon-grant")),
        idempotency_queue::Header::new("business-key"),
        move |job: Job| {
            started.record(&job);
            let gate = Arc::clone(&held);
            async move {
                let _pass = gate.acquire().await.map_err(|error| error.to_string())?;
                Ok::<_, String>(())
            }
        },
    );
    (Arc::new(consumer), ledger, gate)
}
