//! Relays whose target is slower than their lease, on every database (`DATABASE_URL`,
//! `MYSQL_URL`, a SQLite file): the relay renews its batch's lease while the target delivers, so
//! no other relay claims the batch meanwhile and every message is delivered once from the
//! outbox side (the target counts, no receiver dedup involved).
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idempotency_outbox::table::{Claimed, OutboxTable};
use idempotency_outbox::{DeliveryError, Relay, Target};
use support::{TestOutbox, holding, table};

/// The lease of every relay here: far shorter than one delivery.
const LEASE: Duration = Duration::from_millis(600);
/// How long the target takes for each batch.
const DELIVERY: Duration = Duration::from_secs(2);

/// A target that takes [`DELIVERY`] per batch and counts what it was handed, per message id.
#[derive(Clone, Default)]
struct SlowCounter {
    deliveries: Arc<Mutex<HashMap<String, usize>>>,
}

impl Target for SlowCounter {
    async fn deliver(&self, batch: &[Claimed]) -> Vec<Result<(), DeliveryError>> {
        {
            let mut deliveries = self.deliveries.lock().unwrap();
            for claimed in batch {
                *deliveries.entry(claimed.message.id.clone()).or_default() += 1;
            }
        }
        tokio::time::sleep(DELIVERY).await;
        vec![Ok(()); batch.len()]
    }
}

/// Holding `table::numbered("S", 12)`: four relays with batches of 4, a 600 ms lease and a 2 s
/// delivery, racing until nothing is pending. One relay finds no batch at first and keeps
/// claiming while the other three deliver: had their leases lapsed, it would take a batch over
/// and deliver it again. Every message is delivered exactly once and marked sent.
async fn slow_deliveries_keep_their_lease<O: OutboxTable>(outbox: &O) {
    let target = SlowCounter::default();
    let relays: Vec<_> = (0..4)
        .map(|_| {
            let relay = Relay::new(outbox.clone(), target.clone())
                .with_batch_size(4)
                .with_lease(LEASE);
            let outbox = outbox.clone();
            tokio::spawn(async move {
                // Relays that lose their batches to each other never drain the outbox: stop
                // then, and let the counts below tell.
                let deadline = Instant::now() + Duration::from_secs(15);
                let mut sent = 0;
                while outbox.counts().await.unwrap().pending > 0 && Instant::now() < deadline {
                    let round = relay.deliver_due().await.unwrap();
                    sent += round.sent;
                    if round.claimed == 0 {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
                sent
            })
        })
        .collect();
    let mut sent = 0;
    for relay in relays {
        sent += relay.await.unwrap();
    }
    let deliveries = target.deliveries.lock().unwrap().clone();
    let twice: Vec<_> = deliveries.iter().filter(|&(_, &n)| n != 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
    assert_eq!(deliveries.len(), 12);
    assert_eq!(sent, 12, "the outbox drained");
    assert_eq!(outbox.counts().await.unwrap().sent, 12);
}

/// [`slow_deliveries_keep_their_lease`] on a fresh `O`.
async fn on<O: TestOutbox>() {
    if let Some(outbox) = holding::<O>(&table::numbered("S", 12)).await {
        slow_deliveries_keep_their_lease(&outbox).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_deliveries_keep_their_lease_on_postgres() {
    on::<idempotency_outbox::Outbox<sqlx::Postgres>>().await;
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_deliveries_keep_their_lease_on_mysql() {
    on::<idempotency_outbox::Outbox<sqlx::MySql>>().await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_deliveries_keep_their_lease_on_sqlite() {
    on::<idempotency_outbox::Outbox<sqlx::Sqlite>>().await;
}
