//! The consume loop: one stream of deliveries, each processed and settled.

use futures_util::future::BoxFuture;
use futures_util::{StreamExt, TryStreamExt};
use idempotency_core::Store;
use lapin::message::Delivery;

use super::DeadLetters;
use super::redeliver::redeliver_counted;
use crate::stop::Stop;
use crate::{Handler, IdempotentConsumer, KeyExtractor, Verdict};

/// Processes `deliveries`, up to `concurrency` at a time, until they end (`Ok`), their channel
/// fails (its error) or `stop` is asked for (`Ok`): then no delivery is started, and the ones
/// in hand finish and are settled.
pub(super) async fn consume<S, K, H>(
    consumer: &IdempotentConsumer<S, K, H>,
    mut deliveries: lapin::Consumer,
    dead_letters: &DeadLetters,
    concurrency: usize,
    stop: &Stop,
) -> Result<(), lapin::Error>
where
    S: Store,
    K: KeyExtractor,
    H: Handler,
{
    let queue = deliveries.queue();
    let queue = queue.as_str();
    // Borrowed, not moved: the loop lets go of its stream as soon as it ends, and dropping the
    // consumer can close its channel while the deliveries in hand still have to be acked on it.
    (&mut deliveries)
        .take_until(stop.asked())
        .try_for_each_concurrent(concurrency.max(1), |delivery| {
            // Boxed as `Send` here, where the borrow of `consumer` has one concrete lifetime, so
            // that a task spawning the loop with concrete closure types is provably `Send`.
            let step: BoxFuture<'_, Result<(), lapin::Error>> =
                Box::pin(handle(consumer, dead_letters, queue, delivery));
            step
        })
        .await
}

async fn handle<S, K, H>(
    consumer: &IdempotentConsumer<S, K, H>,
    dead_letters: &DeadLetters,
    queue: &str,
    mut delivery: Delivery,
) -> Result<(), lapin::Error>
where
    S: Store,
    K: KeyExtractor,
    H: Handler,
{
    let message = super::message(&mut delivery);
    // Kept (a reference count, not a copy) for the dead letter.
    let payload = message.payload().clone();
    // Unknown only for a broker redelivery of an uncounted message: at least the second.
    let deliveries = message.delivery_count().unwrap_or(2);
    let verdict = consumer.process(message).await;
    if let Verdict::Rejected(reason) = &verdict {
        let namespace = consumer.scope().namespace();
        return dead_letters
            .settle(&delivery, queue, &payload, reason, namespace)
            .await;
    }
    if let Verdict::Failed { retry_after, .. } = &verdict {
        // Counted, so that `with_max_deliveries` ends a poison message on any queue type.
        redeliver_counted(
            dead_letters,
            delivery,
            queue,
            payload,
            deliveries,
            *retry_after,
        );
        return Ok(());
    }
    if let Err(error) = super::settle(&delivery.acker, verdict.action()).await {
        tracing::warn!(%error, %verdict, "could not settle a delivery; the broker will redeliver it");
    }
    Ok(())
}
