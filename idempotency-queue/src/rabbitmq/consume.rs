//! The consume loop.

use futures_util::TryStreamExt;
use futures_util::future::BoxFuture;
use idempotency_core::Store;
use lapin::message::Delivery;

use crate::{Handler, IdempotentConsumer, KeyExtractor};

/// Processes deliveries from `deliveries`, up to `concurrency` at a time, until the consumer is
/// cancelled (returns `Ok`) or the channel fails (returns the error; unacked deliveries are
/// redelivered by the broker, and the store keeps them from running twice).
pub async fn consume<S, K, H>(
    consumer: &IdempotentConsumer<S, K, H>,
    deliveries: lapin::Consumer,
    concurrency: usize,
) -> Result<(), lapin::Error>
where
    S: Store,
    K: KeyExtractor,
    H: Handler,
{
    deliveries
        .try_for_each_concurrent(concurrency.max(1), |delivery| {
            // Boxed as `Send` here, where the borrow of `consumer` has one concrete lifetime, so
            // that a task spawning `consume` with concrete closure types is provably `Send`.
            let step: BoxFuture<'_, Result<(), lapin::Error>> =
                Box::pin(handle(consumer, delivery));
            step
        })
        .await
}

async fn handle<S, K, H>(
    consumer: &IdempotentConsumer<S, K, H>,
    mut delivery: Delivery,
) -> Result<(), lapin::Error>
where
    S: Store,
    K: KeyExtractor,
    H: Handler,
{
    let message = super::message(&mut delivery);
    let verdict = consumer.process(message).await;
    if let Err(error) = super::settle(&delivery.acker, verdict.action()).await {
        tracing::warn!(%error, %verdict, "could not settle a delivery; the broker will redeliver it");
    }
    Ok(())
}
