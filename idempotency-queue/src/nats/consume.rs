//! The consume loop.

use std::pin::pin;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use futures_util::future::BoxFuture;
use futures_util::{Stream, TryStreamExt};
use idempotency_core::Store;

use crate::{Handler, IdempotentConsumer, KeyExtractor};

/// How often [`consume`] tells JetStream that a message is still being worked on (`+WPI`): a
/// third of JetStream's default `ack_wait` (30 s).
pub const DEFAULT_PROGRESS_INTERVAL: Duration = Duration::from_secs(10);

/// Processes messages from `messages`, up to `concurrency` at a time, until the stream ends
/// (returns `Ok`) or fails (returns its error; unacked messages are redelivered after
/// `ack_wait`, and the store keeps them from running twice).
///
/// While a handler runs longer than [`DEFAULT_PROGRESS_INTERVAL`], the message is marked in
/// progress at that interval, so JetStream does not redeliver it meanwhile; with a shorter
/// `ack_wait`, use [`consume_with_progress`].
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
    consume_with_progress(consumer, messages, concurrency, DEFAULT_PROGRESS_INTERVAL).await
}

/// [`consume`], marking a message in progress (`+WPI`) every `progress_every` while its handler
/// runs. Keep it well under the consumer's `ack_wait` (a third, say); `Duration::ZERO` sends none.
///
/// Without it, a handler slower than `ack_wait` has its message redelivered while it runs.
/// The store keeps that copy from running (it is requeued as in flight), but every such
/// redelivery counts towards `max_deliver`: once it is reached, a handler that then fails
/// leaves a message JetStream no longer redelivers.
pub async fn consume_with_progress<S, K, H, E>(
    consumer: &IdempotentConsumer<S, K, H>,
    messages: impl Stream<Item = Result<jetstream::Message, E>>,
    concurrency: usize,
    progress_every: Duration,
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
            let step: BoxFuture<'_, Result<(), E>> =
                Box::pin(handle(consumer, delivered, progress_every));
            step
        })
        .await
}

async fn handle<S, K, H, E>(
    consumer: &IdempotentConsumer<S, K, H>,
    delivered: jetstream::Message,
    progress_every: Duration,
) -> Result<(), E>
where
    S: Store,
    K: KeyExtractor,
    H: Handler,
{
    let work = consumer.process(super::message(&delivered));
    let verdict = reporting_progress(&delivered, progress_every, work).await;
    if let Err(error) = super::settle(&delivered, verdict.action()).await {
        tracing::warn!(%error, %verdict, "could not settle a message; JetStream will redeliver it");
    }
    Ok(())
}

/// Awaits `work`, sending `+WPI` for `delivered` every `every` (never if zero) until it is
/// done. Work done within the first interval sends nothing.
async fn reporting_progress<T>(
    delivered: &jetstream::Message,
    every: Duration,
    work: impl Future<Output = T>,
) -> T {
    if every.is_zero() {
        return work.await;
    }
    let mut work = pin!(work);
    loop {
        match tokio::time::timeout(every, work.as_mut()).await {
            Ok(output) => return output,
            Err(_elapsed) => {
                if let Err(error) = delivered.ack_with(AckKind::Progress).await {
                    tracing::debug!(%error, "could not mark a message in progress");
                }
            }
        }
    }
}
