//! The consume loop.

use std::future::Future;

use futures_util::TryStreamExt;
use futures_util::future::BoxFuture;
use idempotency_core::Store;
use lapin::message::Delivery;

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
        .try_for_each_concurrent(concurrency.max(1), |delivery| {
            // Boxed as `Send` here, where the borrow of `consumer` has one concrete lifetime, so
            // that a task spawning `consume` with concrete closure types is provably `Send`.
            let step: BoxFuture<'_, Result<(), lapin::Error>> =
                Box::pin(handle(consumer, delivery));
            step
        })
        .await
}

/// [`consume`] across broker outages: `open` connects and starts consuming (connection,
/// channel, `basic_qos`, declarations, `basic_consume`), and is called again, after a pause
/// (100 ms doubling to 5 s), whenever it fails or its deliveries end. Runs until dropped.
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
///     channel
///         .basic_consume("coupon.grant".into(), "coupon-granter".into(), BasicConsumeOptions::default(), FieldTable::default())
///         .await
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
    Fut: Future<Output = Result<lapin::Consumer, lapin::Error>>,
{
    crate::reconnect::forever("rabbitmq", || {
        let opened = open();
        async move { consume(consumer, opened.await?, concurrency).await }
    })
    .await;
}

async fn handle<S, K, H>(
    consumer: &IdempotentConsumer<S, K, H>,
    mut delivery: Delivery,
) -> Result<(), lapin::Error>
where
    S: Store,
    K: KeyExtractor,
    H: Handler,
{
    let message = super::message(&mut delivery);
    let verdict = consumer.process(message).await;
    if let Err(error) = super::settle(&delivery.acker, verdict.action()).await {
        tracing::warn!(%error, %verdict, "could not settle a delivery; the broker will redeliver it");
    }
    Ok(())
}
