//! The consume loop.

use futures_util::TryStreamExt;
use idempotency_core::Store;

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
        .try_for_each_concurrent(concurrency.max(1), |mut delivery| async move {
            let message = super::message(&mut delivery);
            let verdict = consumer.process(message).await;
            if let Err(error) = super::settle(&delivery.acker, verdict.action()).await {
                tracing::warn!(%error, %verdict, "could not settle a delivery; the broker will redeliver it");
            }
            Ok(())
        })
        .await
}
