//! The consume loop.

use std::future::Future;

use futures_util::future::BoxFuture;
use futures_util::{StreamExt, TryStreamExt};
use idempotency_core::Store;
use lapin::message::Delivery;

use super::DeadLetters;
use super::redeliver::redeliver_counted;
use crate::reconnect::{Stop, until, with_shutdown};
use crate::{Handler, IdempotentConsumer, KeyExtractor, Verdict};

/// Processes deliveries from `deliveries`, up to `concurrency` at a time, until the consumer is
/// cancelled (returns `Ok`) or the channel fails (returns the error; unacked deliveries are
/// redelivered by the broker, and the store keeps them from running twice).
///
/// Rejected deliveries go to `dead_letters`; if its channel closes, the delivery is requeued
/// and its error returned.
pub async fn consume<S, K, H>(
    consumer: &IdempotentConsumer<S, K, H>,
    deliveries: lapin::Consumer,
    dead_letters: &DeadLetters,
    concurrency: usize,
) -> Result<(), lapin::Error>
where
    S: Store,
    K: KeyExtractor,
    H: Handler,
{
    consume_while(
        consumer,
        deliveries,
        dead_letters,
        concurrency,
        &Stop::never(),
    )
    .await
}

/// [`consume`] until `stop` is asked for: then no delivery is started, and the ones in hand
/// finish and are settled.
async fn consume_while<S, K, H>(
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
            // that a task spawning `consume` with concrete closure types is provably `Send`.
            let step: BoxFuture<'_, Result<(), lapin::Error>> =
                Box::pin(handle(consumer, dead_letters, queue, delivery));
            step
        })
        .await
}

/// [`consume`] across broker outages: `open` connects and starts consuming (connection,
/// channel, `basic_qos`, declarations, [`DeadLetters`] on the same connection, `basic_consume`),
/// and is called again, after a pause (100 ms doubling to 5 s), whenever it fails or its
/// deliveries end (or its dead-letter channel closes). Runs until dropped.
///
/// A delivery whose ack was lost with its connection is redelivered by the broker, and the
/// store answers it as a duplicate: it is not run again.
///
/// ```no_run
/// # use idempotency_queue::{IdempotentConsumer, KeyExtractor, Handler, rabbitmq};
/// # use idempotency_core::Store;
/// use lapin::{Connection, ConnectionProperties, options::*, types::FieldTable};
///
/// # async fn run<S: Store, K: KeyExtractor, H: Handler>(consumer: IdempotentConsumer<S, K, H>) {
/// rabbitmq::consume_reconnecting(&consumer, 16, || async {
///     let url = "amqp://guest:guest@127.0.0.1:5672";
///     let connection = Connection::connect(url, ConnectionProperties::default()).await?;
///     let channel = connection.create_channel().await?;
///     channel.basic_qos(32, BasicQosOptions::default()).await?;
///     let dead_letters = rabbitmq::DeadLetters::declare(&connection, "coupon.grant").await?;
///     let deliveries = channel
///         .basic_consume("coupon.grant".into(), "coupon-granter".into(), BasicConsumeOptions::default(), FieldTable::default())
///         .await?;
///     Ok((deliveries, dead_letters))
/// })
/// .await;
/// # }
/// ```
pub async fn consume_reconnecting<S, K, H, F, Fut>(
    consumer: &IdempotentConsumer<S, K, H>,
    concurrency: usize,
    mut open: F,
) where
    S: Store,
    K: KeyExtractor,
    H: Handler,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(lapin::Consumer, DeadLetters), lapin::Error>>,
{
    until("rabbitmq", &Stop::never(), || {
        let opened = open();
        async move {
            let (deliveries, dead_letters) = opened.await?;
            consume(consumer, deliveries, &dead_letters, concurrency).await
        }
    })
    .await;
}

/// What `open` hands [`consume_reconnecting_until`]: the connection the deliveries come on
/// (closed at the stop), the deliveries, and where rejected ones go.
pub struct Session {
    /// The connection: closing it sends the last acks and gives the broker back the deliveries
    /// that were prefetched but not started.
    pub connection: lapin::Connection,
    /// The deliveries (`basic_consume` on a channel of `connection`).
    pub deliveries: lapin::Consumer,
    /// Where rejected deliveries go ([`DeadLetters::declare`] on `connection`).
    pub dead_letters: DeadLetters,
}

/// [`consume_reconnecting`] with a graceful stop, for a service that is told to stop (SIGTERM
/// from an orchestrator, Ctrl-C): when `shutdown` completes, no new delivery starts, the ones in
/// hand finish and are settled, then the connection is closed, which sends their acks and
/// requeues what was prefetched but not started; then it returns. Bound the wait for slow
/// handlers with `tokio::time::timeout` around the call: what is still in hand at the timeout is
/// redelivered, and the store keeps it from running twice.
///
/// ```no_run
/// # use idempotency_queue::{IdempotentConsumer, KeyExtractor, Handler, rabbitmq};
/// # use idempotency_core::Store;
/// use lapin::{Connection, ConnectionProperties, options::*, types::FieldTable};
///
/// # async fn run<S: Store, K: KeyExtractor, H: Handler>(consumer: IdempotentConsumer<S, K, H>) {
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
/// let shutdown = async { tokio::signal::ctrl_c().await.ok(); };
/// rabbitmq::consume_reconnecting_until(&consumer, 16, open, shutdown).await;
/// # }
/// ```
pub async fn consume_reconnecting_until<S, K, H, F, Fut>(
    consumer: &IdempotentConsumer<S, K, H>,
    concurrency: usize,
    mut open: F,
    shutdown: impl Future<Output = ()>,
) where
    S: Store,
    K: KeyExtractor,
    H: Handler,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Session, lapin::Error>>,
{
    with_shutdown(shutdown, |stop| async move {
        until("rabbitmq", &stop, || {
            let opened = open();
            let stop = stop.clone();
            async move {
                let session = tokio::select! {
                    opened = opened => opened?,
                    () = stop.asked() => return Ok(()),
                };
                let consumed = consume_while(
                    consumer,
                    session.deliveries,
                    &session.dead_letters,
                    concurrency,
                    &stop,
                )
                .await;
                if stop.requested() {
                    session.connection.close(200, "stopping".into()).await?;
                }
                consumed
            }
        })
        .await;
    })
    .await;
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
