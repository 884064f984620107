//! The builder that runs a consumer on RabbitMQ: where the deliveries come from, how many at a
//! time, and when to stop.

use std::fmt;
use std::future::{Future, IntoFuture};

use idempotency_core::Store;

use super::DeadLetters;
use super::consume::consume;
use super::session::{Open, Session, reconnecting};
use crate::serve::{Options, ServeFuture};
use crate::{Handler, IdempotentConsumer, KeyExtractor};

/// Runs `consumer` on `deliveries` (a `basic_consume` with manual acks), rejected deliveries
/// going to `dead_letters`. Set the options of [`Serve`], then `.await` it.
///
/// It returns when the deliveries end (the consumer was cancelled: `Ok`), when their channel
/// fails (its error; unacked deliveries are redelivered by the broker, and the store keeps them
/// from running twice) or after a graceful stop (`Ok`). If the dead-letter channel closes, the
/// delivery is requeued and that error returned.
pub fn serve<'a, S, K, H>(
    consumer: &'a IdempotentConsumer<S, K, H>,
    deliveries: lapin::Consumer,
    dead_letters: &'a DeadLetters,
) -> Serve<'a, S, K, H>
where
    S: Store,
    K: KeyExtractor,
    H: Handler,
{
    Serve::new(
        consumer,
        Source::Deliveries {
            deliveries,
            dead_letters,
        },
    )
}

/// Runs `consumer` across broker outages: `open` connects and starts consuming (connection,
/// channel, `basic_qos`, declarations, [`DeadLetters`] on the same connection,
/// `basic_consume`), and is called again, after a pause (100 ms doubling to 5 s), whenever it
/// fails or its deliveries end (or its dead-letter channel closes). Set the options of
/// [`Serve`], then `.await` it: it runs until dropped, or until its graceful stop (then `Ok`).
///
/// A delivery whose ack was lost with its connection is redelivered by the broker, and the
/// store answers it as a duplicate: it is not run again.
///
/// ```no_run
/// # use idempotency_queue::{IdempotentConsumer, KeyExtractor, Handler, rabbitmq};
/// # use idempotency_core::Store;
/// use lapin::{Connection, ConnectionProperties, options::*, types::FieldTable};
///
/// # async fn run<S: Store, K: KeyExtractor, H: Handler>(consumer: IdempotentConsumer<S, K, H>) -> Result<(), lapin::Error> {
/// let open = || async {
///     let url = "amqp://guest:guest@127.0.0.1:5672";
///     let connection = Connection::connect(url, ConnectionProperties::default()).await?;
///     let channel = connection.create_channel().await?;
///     channel.basic_qos(32, BasicQosOptions::default()).await?;
///     let dead_letters = rabbitmq::DeadLetters::declare(&connection, "coupon.grant").await?;
///     let deliveries = channel
///         .basic_consume("coupon.grant".into(), "coupon-granter".into(), BasicConsumeOptions::default(), FieldTable::default())
///         .await?;
///     Ok(rabbitmq::Session { connection, deliveries, dead_letters })
/// };
/// rabbitmq::serve_reconnecting(&consumer, open)
///     .concurrency(16)
///     .with_graceful_shutdown(async { tokio::signal::ctrl_c().await.ok(); })
///     .await
/// # }
/// ```
pub fn serve_reconnecting<'a, S, K, H, F, Fut>(
    consumer: &'a IdempotentConsumer<S, K, H>,
    mut open: F,
) -> Serve<'a, S, K, H>
where
    S: Store,
    K: KeyExtractor,
    H: Handler,
    F: FnMut() -> Fut + Send + 'a,
    Fut: Future<Output = Result<Session, lapin::Error>> + Send + 'a,
{
    let open: Open<'a> = Box::new(move || Box::pin(open()));
    Serve::new(consumer, Source::Reconnecting(open))
}

/// A RabbitMQ consumer to run, from [`serve`] or [`serve_reconnecting`]: set its options, then
/// `.await` it (it is [`IntoFuture`], a [`ServeFuture`] that can be spawned).
///
/// Keep the channel's prefetch (`basic_qos`) at least the [`concurrency`](Self::concurrency),
/// so a message waiting for its delayed requeue does not stall the rest.
///
/// ```no_run
/// use idempotency_core::{Idempotency, MemoryStore, Scope};
/// use idempotency_queue::{Header, IdempotentConsumer, Job, rabbitmq};
/// use lapin::{Connection, ConnectionProperties, options::*, types::FieldTable};
///
/// # async fn run() -> Result<(), lapin::Error> {
/// let connection = Connection::connect("amqp://guest:guest@127.0.0.1:5672", ConnectionProperties::default()).await?;
/// let channel = connection.create_channel().await?;
/// channel.basic_qos(32, BasicQosOptions::default()).await?;
/// let dead_letters = rabbitmq::DeadLetters::declare(&connection, "coupon.grant").await?;
/// let deliveries = channel
///     .basic_consume("coupon.grant".into(), "coupon-granter".into(), BasicConsumeOptions::default(), FieldTable::default())
///     .await?;
/// let consumer = IdempotentConsumer::new(
///     Idempotency::new(MemoryStore::new()),
///     Scope::new("coupon-grant"),
///     Header::new("business-key"),
///     |job: Job| async move { Ok::<_, std::io::Error>(()) },
/// );
/// rabbitmq::serve(&consumer, deliveries, &dead_letters)
///     .concurrency(16)
///     .with_graceful_shutdown(async { tokio::signal::ctrl_c().await.ok(); })
///     .await?;
/// // The deliveries prefetched but not started go back to the queue.
/// connection.close(200, "stopping".into()).await
/// # }
/// ```
#[must_use = "a consumer does nothing until it is awaited"]
pub struct Serve<'a, S: Store, K, H> {
    consumer: &'a IdempotentConsumer<S, K, H>,
    source: Source<'a>,
    options: Options<'a>,
}

/// Where the deliveries come from.
enum Source<'a> {
    /// One stream of deliveries, consumed until it ends or fails.
    Deliveries {
        deliveries: lapin::Consumer,
        dead_letters: &'a DeadLetters,
    },
    /// Sessions opened again whenever one fails or ends.
    Reconnecting(Open<'a>),
}

impl<'a, S: Store, K, H> Serve<'a, S, K, H> {
    fn new(consumer: &'a IdempotentConsumer<S, K, H>, source: Source<'a>) -> Self {
        Self {
            consumer,
            source,
            options: Options::new(),
        }
    }

    /// Handles up to `n` deliveries at a time (at least one; default [`DEFAULT_CONCURRENCY`](crate::DEFAULT_CONCURRENCY)).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.options.set_concurrency(n);
        self
    }

    /// Stops gracefully when `signal` completes (SIGTERM from an orchestrator, Ctrl-C): no new
    /// delivery starts, the ones in hand finish and are settled, then it returns `Ok`.
    ///
    /// [`serve_reconnecting`] then closes the session's connection, which sends the last acks
    /// and gives the broker back what was prefetched but not started. After [`serve`], the
    /// channel is yours: close it (or its connection) to give those back. Bound the wait for
    /// slow handlers with `tokio::time::timeout` around the `.await`: what is still in hand at
    /// the timeout is redelivered, and the store keeps it from running twice.
    pub fn with_graceful_shutdown(mut self, signal: impl Future<Output = ()> + Send + 'a) -> Self {
        self.options.set_shutdown(signal);
        self
    }
}

impl<'a, S, K, H> IntoFuture for Serve<'a, S, K, H>
where
    S: Store,
    K: KeyExtractor,
    H: Handler,
{
    type Output = Result<(), lapin::Error>;
    type IntoFuture = ServeFuture<'a, lapin::Error>;

    fn into_future(self) -> Self::IntoFuture {
        let Self {
            consumer,
            source,
            options,
        } = self;
        options.serve(move |concurrency, stop| async move {
            match source {
                Source::Deliveries {
                    deliveries,
                    dead_letters,
                } => consume(consumer, deliveries, dead_letters, concurrency, &stop).await,
                Source::Reconnecting(open) => {
                    reconnecting(consumer, open, concurrency, &stop).await;
                    Ok(())
                }
            }
        })
    }
}

impl<S: Store, K, H> fmt::Debug for Serve<'_, S, K, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match &self.source {
            Source::Deliveries { .. } => "deliveries",
            Source::Reconnecting(_) => "reconnecting",
        };
        f.debug_struct("Serve")
            .field("source", &source)
            .field("concurrency", &self.options.concurrency)
            .field("graceful_shutdown", &self.options.shutdown.is_some())
            .finish_non_exhaustive()
    }
}
