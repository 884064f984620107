//! The consume loop: one stream of JetStream messages, each processed and settled.

use std::time::Duration;

use async_nats::jetstream;
use futures_util::future::BoxFuture;
use futures_util::{Stream, TryStreamExt};
use idempotency_core::Store;

use super::DeadLetters;
use super::progress::reporting_progress;
use crate::{Handler, IdempotentConsumer, KeyExtractor, Verdict};

/// Processes `messages`, up to `concurrency` at a time, marking each in progress every
/// `progress_every` while its handler runs, until the stream ends (`Ok`) or fails (its error;
/// unacked messages are redelivered after `ack_wait`, and the store keeps them from running
/// twice). Rejected messages go to `dead_letters`, then are terminated (`-NAK`ed if their dead
/// letter could not be stored).
pub(super) async fn consume<S, K, H, E>(
    consumer: &IdempotentConsumer<S, K, H>,
    messages: impl Stream<Item = Result<jetstream::Message, E>>,
    dead_letters: &DeadLetters,
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
            // that a task spawning the loop with concrete closure types is provably `Send`.
            let step: BoxFuture<'_, Result<(), E>> =
                Box::pin(handle(consumer, dead_letters, delivered, progress_every));
            step
        })
        .await
}

async fn handle<S, K, H, E>(
    consumer: &IdempotentConsumer<S, K, H>,
    dead_letters: &DeadLetters,
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
    let settled = match &verdict {
        Verdict::Rejected(reason) => {
            let namespace = consumer.scope().namespace();
            dead_letters.settle(&delivered, reason, namespace).await
        }
        _ => super::settle(&delivered, verdict.action()).await,
    };
    if let Err(error) = settled {
        tracing::warn!(%error, %verdict, "could not settle a message; JetStream will redeliver it");
    }
    Ok(())
}
