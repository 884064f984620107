//! An at-least-once queue consumer with `#[idempotent]`: the broker redelivers (lost ack,
//! consumer crash, producer retry), the handler grants once per business key, and every
//! delivery gets an ack, a delayed requeue or a dead-letter.
//!
//! Run: `cargo run -p idempotency-macros --example queue_consumer`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idempotency_core::{Error, Idempotency, MemoryStore};
use idempotency_function::idempotent;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// A delivery as the broker hands it over.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct OrderPaid {
    trade_no: String,
    user_id: u64,
}

/// What the consumer tells the broker.
#[derive(Debug, PartialEq)]
enum Action {
    Ack,
    Requeue(Duration),
    DeadLetter(String),
}

/// Why a delivery was not handled.
#[derive(Debug)]
enum HandleError {
    /// Worth another delivery later (in flight elsewhere, store down, downstream timeout).
    Retry(Duration),
    /// Will never succeed (same key, other payload).
    Poison(String),
}

impl From<Error> for HandleError {
    fn from(error: Error) -> Self {
        match error.retry_after() {
            Some(after) => Self::Retry(after),
            None if error.is_retryable() => Self::Retry(Duration::from_secs(1)),
            None => Self::Poison(error.to_string()),
        }
    }
}

struct CouponConsumer {
    idempotency: Idempotency<MemoryStore>,
    granted: AtomicU64,
}

impl CouponConsumer {
    /// Grants one coupon per trade number, however often the message arrives.
    #[idempotent(key = message.trade_no, store = self.idempotency, namespace = "coupon.grant",
                 fingerprint = [message.user_id], lease = "30s", wait = "5s")]
    async fn handle(&self, message: OrderPaid) -> Result<u64, HandleError> {
        Ok(self.granted.fetch_add(1, Ordering::SeqCst) + 1)
    }

    async fn consume(&self, message: OrderPaid) -> Action {
        match self.handle(message).await {
            Ok(_) => Action::Ack,
            Err(HandleError::Retry(after)) => Action::Requeue(after),
            Err(HandleError::Poison(reason)) => Action::DeadLetter(reason),
        }
    }
}

#[tokio::main]
async fn main() {
    let consumer = Arc::new(CouponConsumer {
        idempotency: Idempotency::new(MemoryStore::new()),
        granted: AtomicU64::new(0),
    });
    let (broker, deliveries) = mpsc::channel::<OrderPaid>(64);
    // At least once: every message twice, and one of them a third time with another payload.
    for n in 0..10 {
        let message = OrderPaid {
            trade_no: format!("T{n}"),
            user_id: n,
        };
        broker.send(message.clone()).await.unwrap();
        broker.send(message).await.unwrap();
    }
    broker
        .send(OrderPaid {
            trade_no: "T3".into(),
            user_id: 999,
        })
        .await
        .unwrap();
    drop(broker);

    // Four workers, as four consumer processes would.
    let mut workers = Vec::new();
    let (actions, mut results) = mpsc::unbounded_channel();
    let deliveries = Arc::new(tokio::sync::Mutex::new(deliveries));
    for _ in 0..4 {
        let (consumer, deliveries, actions) = (
            Arc::clone(&consumer),
            Arc::clone(&deliveries),
            actions.clone(),
        );
        workers.push(tokio::spawn(async move {
            loop {
                let Some(message) = deliveries.lock().await.recv().await else {
                    break;
                };
                actions.send(consumer.consume(message).await).unwrap();
            }
        }));
    }
    drop(actions);
    for worker in workers {
        worker.await.unwrap();
    }
    let (mut acked, mut dead) = (0, 0);
    while let Some(action) = results.recv().await {
        match action {
            Action::Ack => acked += 1,
            Action::DeadLetter(reason) => {
                println!("dead-lettered: {reason}");
                dead += 1;
            }
            Action::Requeue(after) => println!("requeued for {after:?}"),
        }
    }
    let granted = consumer.granted.load(Ordering::SeqCst);
    println!("deliveries acked: {acked}, dead-lettered: {dead}, coupons granted: {granted}");
    assert_eq!((acked, dead, granted), (20, 1, 10));
}
