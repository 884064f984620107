//! The consume loop: one stream of JetStream messages, each processed and settled.

use std::time::Duration;

use async_nats::jetstream;
use futures_util::future::BoxFuture;
use futures_util::{Stream, TryStreamExt};
use idempotency_core::Store;

use super::DeadLetters;
use super::progress::reporting_progress;
use crate::{Handler, IdempotentConsumer, KeyExtractor, Verdict};

/// What consuming JetStream messages takes: the consumer, where rejected messages go, how
/// many run at a time, and how often a running one is marked in progress.
pub(super) struct Consuming<'a, S: Store, K, H> {
    pub(super) consumer: &'a IdempotentConsumer<S, K, H>,
    pub(super) dead_letters: &'a DeadLetters,
    pub(super) concurrency: usize,
    pub(super) progress_every: Duration,
}

// By hand: a derive would ask `S`, `K` and `H` to be `Copy`, and only references are copied.
impl<S: Store, K, H> Clone for Consuming<'_, S, K, H> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S: Store, K, H> Copy for Consuming<'_, S, K, H> {}

impl<S, K, H> Consuming<'_, S, K, H>
where
    S: Store,
    K: KeyExtractor,
    H: Handler,
{
    /// Processes `messages`, up to `concurrency` at a time, marking each in progress every
    /// `progress_every` while its handler runs, until the stream ends (`Ok`) or fails (its
    /// error; unacked messages are redelivered after `ack_wait`, and the store keeps them from
    /// running twice). Rejected messages go to `dead_letters`, then are terminated (`-NAK`ed if
    /// their dead letter could not be stored).
    pub(super) async fn consume<E>(
        self,
        messages: impl Stream<Item = Result<jetstream::Message, E>>,
    ) -> Result<(), E> {
        messages
            .try_for_each_concurrent(self.concurrency.max(1), |delivered| {
                // Boxed as `Send` here, where the borrow of `consumer` has one concrete
                // lifetime, so that a task spawning the loop with concrete closure types is
                // provably `Send`.
                let step: BoxFuture<'_, Result<(), E>> = Box::pin(self.handle(delivered));
                step
            })
            .await
    }

    /// Processes one message and settles it.
    async fn handle<E>(self, delivered: jetstream::Message) -> Result<(), E> {
        let consumer = self.consumer;
        let work = consumer.process(super::message(&delivered));
        let verdict = reporting_progress(&delivered, self.progress_every, work).await;
        let settled = match &verdict {
            Verdict::Rejected(reason) => {
                let namespace = consumer.scope().namespace();
                self.dead_letters
                    .settle(&delivered, reason, namespace)
                    .await
            }
            _ => super::settle(&delivered, verdict.action()).await,
        };
        if let Err(error) = settled {
            tracing::warn!(%error, %verdict, "could not settle a message; JetStream will redeliver it");
        }
        Ok(())
    }
}
