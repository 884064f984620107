//! The consume loop.

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use futures_util::future::BoxFuture;
use futures_util::{Stream, StreamExt, TryStreamExt};
use idempotency_core::Store;

use super::DeadLetters;
use crate::reconnect::{Stop, until, with_shutdown};
use crate::{Handler, IdempotentConsumer, KeyExtractor, Verdict};

/// JetStream's `ack_wait` when a consumer sets none.
pub const DEFAULT_ACK_WAIT: Duration = Duration::from_secs(30);

/// How often [`consume`] tells JetStream that a message is still being worked on (`+WPI`): a
/// third of [`DEFAULT_ACK_WAIT`].
pub const DEFAULT_PROGRESS_INTERVAL: Duration = Duration::from_secs(10);

/// The `+WPI` interval for a consumer whose `ack_wait` is `ack_wait`: a third of it, so that two
/// marks can be lost before JetStream redelivers; zero (unset) stands for [`DEFAULT_ACK_WAIT`].
///
/// ```
/// use std::time::Duration;
/// use idempotency_queue::nats::progress_interval;
/// assert_eq!(progress_interval(Duration::from_secs(3)), Duration::from_secs(1));
/// assert_eq!(progress_interval(Duration::ZERO), Duration::from_secs(10));
/// ```
pub fn progress_interval(ack_wait: Duration) -> Duration {
    let ack_wait = if ack_wait.is_zero() {
        DEFAULT_ACK_WAIT
    } else {
        ack_wait
    };
    ack_wait / 3
}

/// [`consume`] for a pull consumer: its messages, each marked in progress every
/// [`progress_interval`] of the consumer's own `ack_wait`.
///
/// `ack_wait` is read from the consumer's cached info (no round trip): from when `pull` was
/// fetched or last refreshed ([`Consumer::info`](jetstream::consumer::Consumer::info)).
/// Returns when the message stream fails, with its error (unacked messages are redelivered after
/// `ack_wait`, and the store keeps them from running twice).
pub async fn consume_pull<S, K, H>(
    consumer: &IdempotentConsumer<S, K, H>,
    pull: &jetstream::consumer::PullConsumer,
    dead_letters: &DeadLetters,
    concurrency: usize,
) -> Result<(), async_nats::Error>
where
    S: Store,
    K: KeyExtractor,
    H: Handler,
{
    consume_pull_while(consumer, pull, dead_letters, concurrency, &Stop::never()).await
}

/// [`consume_pull`] until `stop` is asked for: then no message is started, and the ones in hand
/// finish and are settled.
async fn consume_pull_while<S, K, H>(
    consumer: &IdempotentConsumer<S, K, H>,
    pull: &jetstream::consumer::PullConsumer,
    dead_letters: &DeadLetters,
    concurrency: usize,
    stop: &Stop,
) -> Result<(), async_nats::Error>
where
    S: Store,
    K: KeyExtractor,
    H: Handler,
{
    let every = progress_interval(pull.cached_info().config.ack_wait);
    let messages = tokio::select! {
        messages = pull.messages() => messages?,
        () = stop.asked() => return Ok(()),
    };
    let messages = messages.take_until(stop.asked());
    consume_with_progress(consumer, messages, dead_letters, concurrency, every).await?;
    Ok(())
}

/// [`consume_pull`] across server outages: whenever the message stream fails or ends (the
/// client lost the server: `async-nats` reconnects by itself underneath), the pull is started
/// again, after a pause (100 ms doubling to 5 s). Runs until dropped.
///
/// A message whose ack was lost is redelivered after `ack_wait`, and the store answers it as a
/// duplicate: it is not run again.
pub async fn consume_pull_reconnecting<S, K, H>(
    consumer: &IdempotentConsumer<S, K, H>,
    pull: &jetstream::consumer::PullConsumer,
    dead_letters: &DeadLetters,
    concurrency: usize,
) where
    S: Store,
    K: KeyExtractor,
    H: Handler,
{
    until("nats", &Stop::never(), || {
        consume_pull(consumer, pull, dead_letters, concurrency)
    })
    .await;
}

/// [`consume_pull_reconnecting`] with a graceful stop, for a service that is told to stop
/// (SIGTERM from an orchestrator, Ctrl-C): when `shutdown` completes, no new message starts, the
/// ones in hand finish and are settled; then it returns. Flush the client
/// (`async_nats::Client::flush`) before the process exits, so the last acks leave it. Messages
/// the client had fetched but not started are redelivered after `ack_wait`. Bound the wait for
/// slow handlers with `tokio::time::timeout` around the call: what is still in hand at the
/// timeout is redelivered too, and the store keeps it from running twice.
///
/// ```no_run
/// # use idempotency_queue::{IdempotentConsumer, KeyExtractor, Handler, nats};
/// # use idempotency_core::Store;
/// # async fn run<S: Store, K: KeyExtractor, H: Handler>(
/// #     consumer: IdempotentConsumer<S, K, H>,
/// #     client: async_nats::Client,
/// #     pull: async_nats::jetstream::consumer::PullConsumer,
/// #     dead_letters: nats::DeadLetters,
/// # ) {
/// let shutdown = async { tokio::signal::ctrl_c().await.ok(); };
/// nats::consume_pull_reconnecting_until(&consumer, &pull, &dead_letters, 16, shutdown).await;
/// client.flush().await.ok();
/// # }
/// ```
pub async fn consume_pull_reconnecting_until<S, K, H>(
    consumer: &IdempotentConsumer<S, K, H>,
    pull: &jetstream::consumer::PullConsumer,
    dead_letters: &DeadLetters,
    concurrency: usize,
    shutdown: impl Future<Output = ()>,
) where
    S: Store,
    K: KeyExtractor,
    H: Handler,
{
    with_shutdown(shutdown, |stop| async move {
        until("nats", &stop, || {
            consume_pull_while(consumer, pull, dead_letters, concurrency, &stop)
        })
        .await;
    })
    .await;
}

/// Processes messages from `messages`, up to `concurrency` at a time, until the stream ends
/// (returns `Ok`) or fails (returns its error; unacked messages are redelivered after
/// `ack_wait`, and the store keeps them from running twice).
///
/// While a handler runs longer than [`DEFAULT_PROGRESS_INTERVAL`], the message is marked in
/// progress at that interval, so JetStream does not redeliver it meanwhile. That suits the
/// default `ack_wait` (30 s); for a pull consumer, [`consume_pull`] follows the consumer's own,
/// and [`consume_with_progress`] takes any interval.
///
/// Rejected messages go to `dead_letters`, then are terminated (`-NAK`ed if their dead letter
/// could not be stored).
pub async fn consume<S, K, H, E>(
    consumer: &IdempotentConsumer<S, K, H>,
    messages: impl Stream<Item = Result<jetstream::Message, E>>,
    dead_letters: &DeadLetters,
    concurrency: usize,
) -> Result<(), E>
where
    S: Store,
    K: KeyExtractor,
    H: Handler,
{
    consume_with_progress(
        consumer,
        messages,
        dead_letters,
        concurrency,
        DEFAULT_PROGRESS_INTERVAL,
    )
    .await
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
            // that a task spawning `consume` with concrete closure types is provably `Send`.
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
