//! The variants' broker: RabbitMQ through lapin.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::TryStreamExt;
use idempotency_core::Store;
use idempotency_queue::{Handler, IdempotentConsumer, KeyExtractor, rabbitmq};
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

use crate::{BENCH_TTL, Broker, Error, KEY_HEADER, Run, guarded_run, timed};

pub(crate) struct RabbitMq {
    connection: Connection,
    channel: Channel,
    messages: usize,
    concurrency: usize,
    nonce: u128,
}

impl RabbitMq {
    pub(crate) async fn connect(
        url: &str,
        messages: usize,
        concurrency: usize,
        nonce: u128,
    ) -> Result<Self, Error> {
        let connection = Connection::connect(url, ConnectionProperties::default()).await?;
        let channel = connection.create_channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        Ok(Self {
            connection,
            channel,
            messages,
            concurrency,
            nonce,
        })
    }

    async fn deliveries(&self, queue: &str) -> Result<lapin::Consumer, Error> {
        let channel = self.connection.create_channel().await?;
        let prefetch = u16::try_from(self.concurrency * 4)?;
        channel
            .basic_qos(prefetch, BasicQosOptions::default())
            .await?;
        Ok(channel
            .basic_consume(
                queue.into(),
                "bench".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?)
    }
}

fn key_of(delivery: &lapin::message::Delivery) -> String {
    let headers = delivery.properties.headers().as_ref();
    let key = headers.and_then(|h| {
        h.inner()
            .get(KEY_HEADER)?
            .as_long_string()
            .map(|s| s.to_string())
    });
    key.unwrap_or_default()
}

impl Broker for RabbitMq {
    fn name(&self) -> &'static str {
        "rabbitmq"
    }

    fn messages(&self) -> usize {
        self.messages
    }

    async fn declare(&self, variant: &str) -> Result<String, Error> {
        let queue = format!("queue-bench-{}-{variant}", self.nonce);
        // Deleted by the broker once unused for BENCH_TTL: a killed run's queues go too.
        let mut arguments = FieldTable::default();
        arguments.insert(
            "x-expires".into(),
            AMQPValue::LongInt(i32::try_from(BENCH_TTL.as_millis())?),
        );
        self.channel
            .queue_declare(
                queue.as_str().into(),
                QueueDeclareOptions::default(),
                arguments,
            )
            .await?;
        Ok(queue)
    }

    async fn publish(&self, queue: &str) -> Result<(), Error> {
        let mut confirms = Vec::with_capacity(self.messages);
        for n in 0..self.messages {
            let mut headers = FieldTable::default();
            headers.insert(
                KEY_HEADER.into(),
                AMQPValue::LongString(LongString::from(format!("T{n}"))),
            );
            let confirm = self
                .channel
                .basic_publish(
                    "".into(),
                    queue.into(),
                    BasicPublishOptions::default(),
                    format!(r#"{{"trade_no":"T{n}","user_id":{n}}}"#).as_bytes(),
                    BasicProperties::default().with_headers(headers),
                )
                .await?;
            confirms.push(confirm);
        }
        for confirm in confirms {
            confirm.await?;
        }
        Ok(())
    }

    async fn bare<F, Fut>(&self, queue: &str, work: F) -> Result<Run, Error>
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), Error>> + Send,
    {
        let done = Arc::new(AtomicU64::new(0));
        let deliveries = self.deliveries(queue).await?;
        let counter = Arc::clone(&done);
        let concurrency = self.concurrency;
        let consume = async move {
            let step = |delivery: lapin::message::Delivery| {
                let counter = Arc::clone(&counter);
                let work = work(key_of(&delivery));
                async move {
                    work.await
                        .map_err(|e| lapin::Error::from(std::io::Error::other(e.to_string())))?;
                    delivery.acker.ack(BasicAckOptions::default()).await?;
                    counter.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                }
            };
            deliveries.try_for_each_concurrent(concurrency, step).await
        };
        timed(self.name(), self.messages, consume, || {
            done.load(Ordering::Relaxed)
        })
        .await
    }

    async fn guarded<S, K, H>(
        &self,
        queue: &str,
        consumer: IdempotentConsumer<S, K, H>,
    ) -> Result<Run, Error>
    where
        S: Store,
        K: KeyExtractor,
        H: Handler,
    {
        let deliveries = self.deliveries(queue).await?;
        let concurrency = self.concurrency;
        let consume = move |consumer: Arc<IdempotentConsumer<S, K, H>>| async move {
            // Every message here has its key and one payload: nothing is rejected.
            let dead_letters = rabbitmq::DeadLetters::drop_and_log();
            rabbitmq::serve(&consumer, deliveries, &dead_letters)
                .concurrency(concurrency)
                .await
        };
        guarded_run(self.name(), self.messages, consumer, consume).await
    }

    async fn delete(&self, queue: &str) -> Result<(), Error> {
        self.channel
            .queue_delete(queue.into(), QueueDeleteOptions::default())
            .await?;
        Ok(())
    }
}
