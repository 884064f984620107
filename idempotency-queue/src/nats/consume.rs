//! The consume loop.

use async_nats::jetstream;
use futures_util::future::BoxFuture;
use futures_util::{Stream, TryStreamExt};
use idempotency_core::Store;

use crate::{Handler, IdempotentConsumer, KeyExtractor};

/// Processes messages from `messages`, up to `concurrency` at a time, until the stream ends
/// (returns `Ok`) or fails (returns its error; unacked messages are redelivered after
/// `ack_wait`, and the store keeps them from running twice).
pub async fn consume<S, K, H, E>(
    consumer: &IdempotentConsumer<S, K, H>,
    messages: impl Stream<Item = Result<jetstream::Message, E>>,
    concurrency: usize,
) -> Result<(), E>
where
    S: Store,
    K: KeyExtractor,
    H: Handler,
{
    messages
        .try_for_each_concurrent(concurrency.max(1), |delivered| {
            // Boxed as `Send` here, where the borrow of `consumer` has one concrete lifetime, so
            // that a task spawning `consume` with concrete closure types is provably `Send`.
            let step: BoxFuture<'_, Result<(), E>> = Box::pin(handle(consumer, delivered));
            step
        })
        .await
}

async fn handle<S, K, H, E>(
    consumer: &IdempotentConsumer<S, K, H>,
    delivered: jetstream::Message,
) -> Result<(), E>
where
    S: Store,
    K: KeyExtractor,
    H: Handler,
{
    let verdict = consumer.process(super::message(&delivered)).await;
    if let Err(error) = super::settle(&delivered, verdict.action()).await {
        tracing::warn!(%error, %verdict, "could not settle a message; JetStream will redeliver it");
    }
    Ok(())
}
