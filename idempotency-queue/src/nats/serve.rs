//! The builder that runs a consumer on JetStream: where the messages come from, how many at a
//! time, how often a running one is marked in progress, and when to stop.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::time::Duration;

use async_nats::jetstream::{self, consumer::PullConsumer};
use futures_util::stream::BoxStream;
use futures_util::{Stream, StreamExt};
use idempotency_core::Store;

use super::consume::Consuming;
use super::progress::{DEFAULT_PROGRESS_INTERVAL, progress_interval};
use super::{DeadLetters, pull};
use crate::serve::{Options, ServeFuture};
use crate::{Handler, IdempotentConsumer, KeyExtractor};

/// Runs `consumer` on `messages`, any stream of JetStream messages (a pull consumer's
/// `messages()`, or a push consumer's), rejected ones going to `dead_letters`. Set the options
/// of [`Serve`], then `.await` it.
///
/// It returns when the stream ends or after a graceful stop (`Ok`), or when the stream fails
/// (its error; unacked messages are redelivered after `ack_wait`, and the store keeps them from
/// running twice). A running message is marked in progress every
/// [`DEFAULT_PROGRESS_INTERVAL`], made for the default `ack_wait` (30 s); see
/// [`Serve::progress_every`].
pub fn serve<'a, S, K, H, E>(
    consumer: &'a IdempotentConsumer<S, K, H>,
    messages: impl Stream<Item = Result<jetstream::Message, E>> + Send + 'a,
    dead_letters: &'a DeadLetters,
) -> Serve<'a, S, K, H, E>
where
    S: Store,
    K: KeyExtractor,
    H: Handler,
    E: Send + 'a,
{
    Serve::new(
        consumer,
        dead_letters,
        Source::Messages(messages.boxed()),
        DEFAULT_PROGRESS_INTERVAL,
    )
}

/// Runs `consumer` on the messages of the pull consumer `pull`, rejected ones going to
/// `dead_letters`. Set the options of [`Serve`], then `.await` it.
///
/// It returns after a graceful stop (`Ok`), or when the pull or its messages fail (the error;
/// unacked messages are redelivered after `ack_wait`, and the store keeps them from running
/// twice). A running message is marked in progress every [`progress_interval`] of the
/// consumer's own `ack_wait`, read from its cached info (no round trip: from when `pull` was
/// fetched or last refreshed with
/// [`Consumer::info`](jetstream::consumer::Consumer::info)).
pub fn serve_pull<'a, S, K, H>(
    consumer: &'a IdempotentConsumer<S, K, H>,
    pull: &'a PullConsumer,
    dead_letters: &'a DeadLetters,
) -> Serve<'a, S, K, H>
where
    S: Store,
    K: KeyExtractor,
    H: Handler,
{
    Serve::new(
        consumer,
        dead_letters,
        Source::Messages(pull::messages(pull).boxed()),
        pull_progress(pull),
    )
}

/// [`serve_pull`] across server outages: whenever the messages fail or end (the client lost
/// the server: `async-nats` reconnects by itself underneath), the pull starts again, after a
/// pause (100 ms doubling to 5 s). Set the options of [`Serve`], then `.await` it: it runs until
/// dropped, or until its graceful stop (then `Ok`).
///
/// A message whose ack was lost is redelivered after `ack_wait`, and the store answers it as a
/// duplicate: it is not run again.
///
/// ```no_run
/// # use idempotency_queue::{IdempotentConsumer, KeyExtractor, Handler, nats};
/// # use idempotency_core::Store;
/// # async fn run<S: Store, K: KeyExtractor, H: Handler>(
/// #     consumer: IdempotentConsumer<S, K, H>,
/// #     client: async_nats::Client,
/// #     pull: async_nats::jetstream::consumer::PullConsumer,
/// #     dead_letters: nats::DeadLetters,
/// # ) -> Result<(), async_nats::Error> {
/// nats::serve_reconnecting(&consumer, &pull, &dead_letters)
///     .concurrency(16)
///     .with_graceful_shutdown(async { tokio::signal::ctrl_c().await.ok(); })
///     .await?;
/// // The last acks leave the client before the process ends.
/// client.flush().await?;
/// # Ok(()) }
/// ```
pub fn serve_reconnecting<'a, S, K, H>(
    consumer: &'a IdempotentConsumer<S, K, H>,
    pull: &'a PullConsumer,
    dead_letters: &'a DeadLetters,
) -> Serve<'a, S, K, H>
where
    S: Store,
    K: KeyExtractor,
    H: Handler,
{
    Serve::new(
        consumer,
        dead_letters,
        Source::Reconnecting(pull),
        pull_progress(pull),
    )
}

fn pull_progress(pull: &PullConsumer) -> Duration {
    progress_interval(pull.cached_info().config.ack_wait)
}

/// A JetStream consumer to run, from [`serve`], [`serve_pull`] or [`serve_reconnecting`]: set
/// its options, then `.await` it (it is [`IntoFuture`], a [`ServeFuture`] that can be
/// spawned). `E` is what a failed message stream returns: `async_nats::Error` for a pull
/// consumer.
///
/// Use explicit acks (`AckPolicy::Explicit`) and a `max_deliver` to bound poison messages; the
/// consumer's `max_ack_pending` bounds the [`concurrency`](Self::concurrency) too.
///
/// ```no_run
/// use idempotency_core::{Idempotency, MemoryStore, Scope};
/// use idempotency_queue::{Header, IdempotentConsumer, Job, nats};
/// use async_nats::jetstream::{self, consumer::pull};
///
/// # async fn run() -> Result<(), async_nats::Error> {
/// let client = async_nats::connect("nats://127.0.0.1:4222").await?;
/// let js = jetstream::new(client.clone());
/// let stream = js.get_stream("COUPONS").await?;
/// let dead_letters = nats::DeadLetters::declare(js, "COUPONS-DEAD", "dead.coupon.grant").await?;
/// let pull = stream
///     .get_or_create_consumer("granter", pull::Config { durable_name: Some("granter".into()), ..Default::default() })
///     .await?;
/// let consumer = IdempotentConsumer::new(
///     Idempotency::new(MemoryStore::new()),
///     Scope::new("coupon-grant"),
///     Header::new("business-key"),
///     |job: Job| async move { Ok::<_, std::io::Error>(()) },
/// );
/// nats::serve_pull(&consumer, &pull, &dead_letters)
///     .concurrency(16)
///     .progress_every(std::time::Duration::from_secs(5))
///     .with_graceful_shutdown(async { tokio::signal::ctrl_c().await.ok(); })
///     .await?;
/// client.flush().await?;
/// # Ok(()) }
/// ```
#[must_use = "a consumer does nothing until it is awaited"]
pub struct Serve<'a, S: Store, K, H, E = async_nats::Error> {
    consumer: &'a IdempotentConsumer<S, K, H>,
    dead_letters: &'a DeadLetters,
    source: Source<'a, E>,
    progress_every: Duration,
    options: Options<'a>,
}

/// Where the messages come from.
enum Source<'a, E> {
    /// One stream of messages (perhaps a pull consumer's), consumed until it ends or fails.
    Messages(BoxStream<'a, Result<jetstream::Message, E>>),
    /// A pull consumer's messages, pulled again whenever they fail or end.
    Reconnecting(&'a PullConsumer),
}

impl<'a, S: Store, K, H, E> Serve<'a, S, K, H, E> {
    fn new(
        consumer: &'a IdempotentConsumer<S, K, H>,
        dead_letters: &'a DeadLetters,
        source: Source<'a, E>,
        progress_every: Duration,
    ) -> Self {
        Self {
            consumer,
            dead_letters,
            source,
            progress_every,
            options: Options::new(),
        }
    }

    /// Handles up to `n` messages at a time (at least one; default [`DEFAULT_CONCURRENCY`](crate::DEFAULT_CONCURRENCY)).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.options.set_concurrency(n);
        self
    }

    /// Marks a message in progress (`+WPI`) every `every` while its handler runs, so JetStream
    /// does not redeliver it meanwhile; `Duration::ZERO` sends none. Keep it well under the
    /// consumer's `ack_wait` (a third, say: [`progress_interval`]). Default: a third of the pull
    /// consumer's `ack_wait` ([`serve_pull`], [`serve_reconnecting`]), or
    /// [`DEFAULT_PROGRESS_INTERVAL`] ([`serve`]).
    ///
    /// Without it, a handler slower than `ack_wait` has its message redelivered while it runs.
    /// The store keeps that copy from running (it is requeued as in flight), but every such
    /// redelivery counts towards `max_deliver`: once it is reached, a handler that then fails
    /// leaves a message JetStream no longer redelivers.
    pub fn progress_every(mut self, every: Duration) -> Self {
        self.progress_every = every;
        self
    }

    /// Stops gracefully when `signal` completes (SIGTERM from an orchestrator, Ctrl-C): no new
    /// message starts, the ones in hand finish and are settled, then it returns `Ok`.
    ///
    /// Flush the client (`async_nats::Client::flush`) before the process exits, so the last
    /// acks leave it. Messages the client had fetched but not started are redelivered after
    /// `ack_wait`. Bound the wait for slow handlers with `tokio::time::timeout` around the
    /// `.await`: what is still in hand at the timeout is redelivered too, and the store keeps it
    /// from running twice.
    pub fn with_graceful_shutdown(mut self, signal: impl Future<Output = ()> + Send + 'a) -> Self {
        self.options.set_shutdown(signal);
        self
    }
}

impl<'a, S, K, H, E> IntoFuture for Serve<'a, S, K, H, E>
where
    S: Store,
    K: KeyExtractor,
    H: Handler,
    E: Send + 'a,
{
    type Output = Result<(), E>;
    type IntoFuture = ServeFuture<'a, E>;

    fn into_future(self) -> Self::IntoFuture {
        let Self {
            consumer,
            dead_letters,
            source,
            progress_every,
            options,
        } = self;
        options.serve(move |concurrency, stop| async move {
            let consuming = Consuming {
                consumer,
                dead_letters,
                concurrency,
                progress_every,
            };
            match source {
                Source::Messages(messages) => {
                    consuming.consume(messages.take_until(stop.asked())).await
                }
                Source::Reconnecting(pull) => {
                    pull::reconnecting(consuming, pull, &stop).await;
                    Ok(())
                }
            }
        })
    }
}

impl<S: Store, K, H, E> fmt::Debug for Serve<'_, S, K, H, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match &self.source {
            Source::Messages(_) => "messages",
            Source::Reconnecting(_) => "reconnecting",
        };
        f.debug_struct("Serve")
            .field("source", &source)
            .field("concurrency", &self.options.concurrency)
            .field("progress_every", &self.progress_every)
            .field("graceful_shutdown", &self.options.shutdown.is_some())
            .finish_non_exhaustive()
    }
}
