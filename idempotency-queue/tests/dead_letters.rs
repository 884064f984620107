//! Rejected messages against the real brokers (RabbitMQ at `AMQP_URL`, NATS JetStream at
//! `NATS_URL`): a message without a business key and one reusing a key with another payload are
//! found, with their reason and original payload, in the dead-letter queue or stream, and
//! nothing else is; a dead letter that cannot be stored leaves its message requeued, never
//! dropped, and it is dead-lettered once a destination exists.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use idempotency_core::{Idempotency, MemoryStore, Scope};
use idempotency_queue::dead_letter::{NAMESPACE_HEADER, REASON_HEADER};
use idempotency_queue::{Header, IdempotentConsumer, Job};
use support::{unique, wait_until};

const LIMIT: Duration = Duration::from_secs(60);
/// The reason a message without the `business-key` header is dead-lettered with.
const NO_KEY: &str = "no business key: the idempotency key is missing";
const MISMATCH: &str = "payload mismatch";

/// A consumer keyed by the `business-key` header, its handler always succeeding.
fn consumer() -> Arc<IdempotentConsumer<MemoryStore, Header, impl idempotency_queue::Handler>> {
    Arc::new(IdempotentConsumer::new(
        Idempotency::new(MemoryStore::new()),
        Scope::new(unique("coupon-grant")),
        Header::new("business-key"),
        |_job: Job| async { Ok::<_, String>(()) },
    ))
}

/// The four messages of every scenario, in order: `T1` processed, `T1` again (a duplicate),
/// one without a key, and `T1` with another payload (a mismatch). `None`: no key.
const MESSAGES: [(Option<&str>, &str); 4] = [
    (Some("T1"), "order 1"),
    (Some("T1"), "order 1"),
    (None, "no key"),
    (Some("T1"), "order 1, other amount"),
];

/// The dead letters expected from [`MESSAGES`]: payload → reason.
fn expected_dead_letters() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("no key".to_owned(), NO_KEY.to_owned()),
        ("order 1, other amount".to_owned(), MISMATCH.to_owned()),
    ])
}

#[cfg(feature = "rabbitmq")]
mod rabbitmq {
    use super::*;
    use idempotency_queue::dead_letter::{
        DELIVERY_TAG_HEADER, ORIGINAL_EXCHANGE_HEADER, ORIGINAL_QUEUE_HEADER,
        ORIGINAL_ROUTING_KEY_HEADER,
    };
    use idempotency_queue::rabbitmq::{self, DeadLetters, dead_letter_name};
    use lapin::message::BasicGetMessage;
    use lapin::options::{
        BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicGetOptions, BasicQosOptions,
        ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions,
        QueueDeleteOptions,
    };
    use lapin::types::{AMQPValue, FieldTable};
    use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use support::amqp::{publish, ready};
    use tokio::sync::Mutex;

    fn url() -> String {
        std::env::var("AMQP_URL")
            .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
    }

    async fn connect() -> Option<Connection> {
        match Connection::connect(&url(), ConnectionProperties::default()).await {
            Ok(connection) => Some(connection),
            Err(error) => idempotency_test::unavailable("RabbitMQ", error),
        }
    }

    async fn declare_queue(channel: &Channel, name: &str) {
        channel
            .queue_declare(
                name.into(),
                QueueDeclareOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
    }

    /// Publishes [`MESSAGES`] to `queue` through the default exchange.
    async fn publish_all(channel: &Channel, queue: &str) {
        for (key, body) in MESSAGES {
            publish(channel, queue, key, body).await;
        }
    }

    /// Waits until `queue` holds `count` ready messages.
    async fn wait_ready(channel: &Channel, queue: &str, count: u32) {
        let deadline = tokio::time::Instant::now() + LIMIT;
        while ready(channel, queue).await != count {
            assert!(
                tokio::time::Instant::now() < deadline,
                "gave up waiting for {count} messages in {queue}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A text header of a got message.
    fn header(message: &BasicGetMessage, name: &str) -> String {
        let headers = message.delivery.properties.headers().as_ref().unwrap();
        match headers.inner().get(name) {
            Some(AMQPValue::LongString(text)) => text.to_string(),
            other => panic!("header {name}: {other:?}"),
        }
    }

    /// Takes every message of the dead-letter queue: payload → message.
    async fn take_all(channel: &Channel, queue: &str) -> BTreeMap<String, BasicGetMessage> {
        let mut taken = BTreeMap::new();
        while let Some(message) = channel
            .basic_get(queue.into(), BasicGetOptions::default())
            .await
            .unwrap()
        {
            message.ack(BasicAckOptions::default()).await.unwrap();
            let payload = String::from_utf8(message.delivery.data.clone()).unwrap();
            assert!(
                taken.insert(payload, message).is_none(),
                "a payload dead-lettered twice"
            );
        }
        taken
    }

    async fn delete(channel: &Channel, queues: &[&str], exchange: &str) {
        for queue in queues {
            channel
                .queue_delete((*queue).into(), QueueDeleteOptions::default())
                .await
                .unwrap();
        }
        channel
            .exchange_delete(exchange.into(), ExchangeDeleteOptions::default())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn rejects_land_in_the_dead_letter_queue_with_their_reason() {
        let Some(connection) = connect().await else {
            return;
        };
        let channel = connection.create_channel().await.unwrap();
        let queue = unique("idem-dl-test");
        declare_queue(&channel, &queue).await;
        publish_all(&channel, &queue).await;

        let consumer = consumer();
        let consuming = connect().await.unwrap();
        let dead_letters = DeadLetters::declare(&consuming, &queue).await.unwrap();
        let consume_channel = consuming.create_channel().await.unwrap();
        consume_channel
            .basic_qos(1, BasicQosOptions::default())
            .await
            .unwrap();
        let deliveries = consume_channel
            .basic_consume(
                queue.as_str().into(),
                "dead-letter-test".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        // One at a time, so that the mismatch comes after the first `T1` is stored.
        let running = Arc::clone(&consumer);
        let task = tokio::spawn(async move {
            rabbitmq::serve(&running, deliveries, &dead_letters)
                .concurrency(1)
                .await
        });
        let dead = dead_letter_name(&queue);
        wait_ready(&channel, &dead, 2).await;
        // Cancelled, the consumer settles what it holds and returns; closing the connection then
        // returns whatever it left unacked to the queue.
        consume_channel
            .basic_cancel("dead-letter-test".into(), BasicCancelOptions::default())
            .await
            .unwrap();
        task.await.unwrap().unwrap();
        consuming.close(200, "done".into()).await.unwrap();

        let stats = consumer.stats().snapshot();
        assert_eq!(
            (stats.processed, stats.replayed, stats.rejected),
            (1, 1, 2),
            "{stats:?}"
        );
        assert_eq!(
            ready(&channel, &queue).await,
            0,
            "nothing left, nothing redelivered"
        );
        let taken = take_all(&channel, &dead).await;
        let reasons: BTreeMap<String, String> = taken
            .iter()
            .map(|(payload, message)| (payload.clone(), header(message, REASON_HEADER)))
            .collect();
        assert_eq!(
            reasons,
            expected_dead_letters(),
            "only the rejects, with their reasons"
        );
        for message in taken.values() {
            assert_eq!(header(message, ORIGINAL_QUEUE_HEADER), queue);
            assert_eq!(header(message, ORIGINAL_ROUTING_KEY_HEADER), queue);
            assert_eq!(header(message, ORIGINAL_EXCHANGE_HEADER), "");
            assert_eq!(
                header(message, NAMESPACE_HEADER),
                consumer.scope().namespace()
            );
            assert!(header(message, DELIVERY_TAG_HEADER).parse::<u64>().is_ok());
        }
        let mismatch = &taken["order 1, other amount"];
        assert_eq!(
            header(mismatch, "business-key"),
            "T1",
            "original headers kept"
        );
        delete(&channel, &[&queue, &dead], &dead).await;
    }

    /// The dead-letter exchange does not exist: the publish closes the dead-letter channel with
    /// `NOT_FOUND`, the delivery is requeued and the session ends; `serve_reconnecting` opens
    /// another, and the message comes back, again and again, until the exchange is declared:
    /// then it is dead-lettered, once.
    #[tokio::test]
    async fn a_dead_letter_without_its_exchange_is_requeued_until_it_exists() {
        let Some(connection) = connect().await else {
            return;
        };
        let channel = connection.create_channel().await.unwrap();
        let queue = unique("idem-dl-test");
        let exchange = unique("idem-dl-missing");
        let dead = format!("{queue}.parked");
        declare_queue(&channel, &queue).await;
        publish_all(&channel, &queue).await;

        let consumer = consumer();
        // The latest consuming channel and how many sessions were opened.
        let latest: Arc<Mutex<Option<Channel>>> = Arc::default();
        let sessions = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn({
            let (consumer, queue, exchange, latest, sessions) = (
                Arc::clone(&consumer),
                queue.clone(),
                exchange.clone(),
                Arc::clone(&latest),
                Arc::clone(&sessions),
            );
            async move {
                let open = || {
                    let (queue, exchange, latest, sessions) = (
                        queue.clone(),
                        exchange.clone(),
                        Arc::clone(&latest),
                        Arc::clone(&sessions),
                    );
                    async move {
                        let connection =
                            Connection::connect(&url(), ConnectionProperties::default()).await?;
                        let dead_letters = DeadLetters::to_exchange(&connection, &exchange)
                            .await?
                            .with_retry_after(Duration::from_millis(50));
                        let channel = connection.create_channel().await?;
                        channel.basic_qos(1, BasicQosOptions::default()).await?;
                        let deliveries = channel
                            .basic_consume(
                                queue.as_str().into(),
                                "dead-letter-test".into(),
                                BasicConsumeOptions::default(),
                                FieldTable::default(),
                            )
                            .await?;
                        *latest.lock().await = Some(channel);
                        sessions.fetch_add(1, Ordering::SeqCst);
                        Ok(rabbitmq::Session {
                            connection,
                            deliveries,
                            dead_letters,
                        })
                    }
                };
                let _ = rabbitmq::serve_reconnecting(&consumer, open)
                    .concurrency(1)
                    .await;
            }
        });
        wait_until(
            "both rejects to come back after a failed dead letter",
            LIMIT,
            || consumer.stats().snapshot().rejected >= 4,
        )
        .await;

        channel
            .exchange_declare(
                exchange.as_str().into(),
                ExchangeKind::Direct,
                ExchangeDeclareOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        declare_queue(&channel, &dead).await;
        channel
            .queue_bind(
                dead.as_str().into(),
                exchange.as_str().into(),
                queue.as_str().into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        wait_ready(&channel, &dead, 2).await;
        // Cancelled, the session settles what it holds and ends; once the next one is open,
        // closing its channel returns whatever it holds unacked to the queue.
        let before = sessions.load(Ordering::SeqCst);
        let consuming = latest.lock().await.clone().unwrap();
        consuming
            .basic_cancel("dead-letter-test".into(), BasicCancelOptions::default())
            .await
            .unwrap();
        wait_until("the next session", LIMIT, || {
            sessions.load(Ordering::SeqCst) > before
        })
        .await;
        task.abort();
        let last = latest.lock().await.take().unwrap();
        last.close(200, "done".into()).await.unwrap();

        let stats = consumer.stats().snapshot();
        assert_eq!((stats.processed, stats.replayed), (1, 1), "{stats:?}");
        assert_eq!(ready(&channel, &queue).await, 0, "nothing left behind");
        let reasons: BTreeMap<String, String> = take_all(&channel, &dead)
            .await
            .iter()
            .map(|(payload, message)| (payload.clone(), header(message, REASON_HEADER)))
            .collect();
        assert_eq!(reasons, expected_dead_letters());
        delete(&channel, &[&queue, &dead], &exchange).await;
    }
}

#[cfg(feature = "nats")]
mod nats {
    use super::*;
    use async_nats::HeaderMap;
    use async_nats::jetstream::{self, consumer::pull, message::StreamMessage, stream};
    use idempotency_queue::dead_letter::{
        DELIVERY_COUNT_HEADER, ORIGINAL_STREAM_HEADER, ORIGINAL_SUBJECT_HEADER,
        STREAM_SEQUENCE_HEADER,
    };
    use idempotency_queue::nats::{self, DeadLetters};

    /// A JetStream context, a fresh stream with one subject and a pull consumer on it; the
    /// streams are deleted by [`Fixture::cleanup`].
    struct Fixture {
        js: jetstream::Context,
        name: String,
        subject: String,
        pull: jetstream::consumer::PullConsumer,
    }

    impl Fixture {
        async fn new() -> Option<Self> {
            let url =
                std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned());
            let client = match async_nats::connect(&url).await {
                Ok(client) => client,
                Err(error) => return idempotency_test::unavailable("NATS", error),
            };
            let js = jetstream::new(client);
            let name = unique("IDEM-DL");
            let subject = format!("idem.dl.{name}");
            let pull = js
                .create_stream(stream::Config {
                    name: name.clone(),
                    subjects: vec![subject.clone()],
                    ..Default::default()
                })
                .await
                .unwrap()
                .create_consumer(pull::Config {
                    durable_name: Some("granter".to_owned()),
                    ..Default::default()
                })
                .await
                .unwrap();
            Some(Self {
                js,
                name,
                subject,
                pull,
            })
        }

        /// The dead-letter stream's name.
        fn dead_stream(&self) -> String {
            format!("{}-DEAD", self.name)
        }

        /// Creates the dead-letter stream, taking `subject`.
        async fn create_dead_stream(&self, subject: &str) -> stream::Stream {
            self.js
                .create_stream(stream::Config {
                    name: self.dead_stream(),
                    subjects: vec![subject.to_owned()],
                    ..Default::default()
                })
                .await
                .unwrap()
        }

        /// Publishes [`MESSAGES`].
        async fn publish_all(&self) {
            for (key, body) in MESSAGES {
                let mut headers = HeaderMap::new();
                if let Some(key) = key {
                    headers.insert("business-key", key);
                }
                self.js
                    .publish_with_headers(self.subject.clone(), headers, body.to_owned().into())
                    .await
                    .unwrap()
                    .await
                    .unwrap();
            }
        }

        /// Waits until the consumer has nothing pending or unacknowledged.
        async fn wait_settled(&self) {
            let deadline = tokio::time::Instant::now() + LIMIT;
            loop {
                let stream = self.js.get_stream(&self.name).await.unwrap();
                let info = stream.consumer_info("granter").await.unwrap();
                if info.num_pending == 0 && info.num_ack_pending == 0 {
                    return;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "messages left unsettled: {info:?}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }

        async fn cleanup(self) {
            self.js.delete_stream(&self.name).await.unwrap();
            let _ = self.js.delete_stream(self.dead_stream()).await;
        }
    }

    /// Waits until `stream` holds `count` messages, then returns them: payload → message.
    async fn dead_letters_in(
        stream: &mut stream::Stream,
        count: u64,
    ) -> BTreeMap<String, StreamMessage> {
        let deadline = tokio::time::Instant::now() + LIMIT;
        while stream.info().await.unwrap().state.messages < count {
            assert!(
                tokio::time::Instant::now() < deadline,
                "gave up waiting for {count} dead letters"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut found = BTreeMap::new();
        for sequence in 1..=count {
            let message = stream.get_raw_message(sequence).await.unwrap();
            let payload = String::from_utf8(message.payload.to_vec()).unwrap();
            assert!(
                found.insert(payload, message).is_none(),
                "a payload dead-lettered twice"
            );
        }
        found
    }

    fn header(message: &StreamMessage, name: &str) -> String {
        match message.headers.get(name) {
            Some(value) => value.as_str().to_owned(),
            None => panic!("header {name} missing: {:?}", message.headers),
        }
    }

    fn reasons(found: &BTreeMap<String, StreamMessage>) -> BTreeMap<String, String> {
        found
            .iter()
            .map(|(payload, message)| (payload.clone(), header(message, REASON_HEADER)))
            .collect()
    }

    #[tokio::test]
    async fn rejects_land_in_the_dead_letter_stream_with_their_reason() {
        let Some(fixture) = Fixture::new().await else {
            return;
        };
        let dead_subject = format!("{}.dead", fixture.subject);
        let mut dead_stream = fixture.create_dead_stream(&dead_subject).await;
        fixture.publish_all().await;
        let consumer = consumer();
        let dead_letters = DeadLetters::to_subject_suffix(fixture.js.clone(), ".dead");
        let (running, pull) = (Arc::clone(&consumer), fixture.pull.clone());
        // One at a time, so that the mismatch comes after the first `T1` is stored.
        let task = tokio::spawn(async move {
            nats::serve_pull(&running, &pull, &dead_letters)
                .concurrency(1)
                .await
        });
        wait_until("four verdicts", LIMIT, || {
            let stats = consumer.stats().snapshot();
            stats.acked() + stats.rejected >= 4
        })
        .await;
        fixture.wait_settled().await;
        task.abort();

        let stats = consumer.stats().snapshot();
        assert_eq!(
            (stats.processed, stats.replayed, stats.rejected),
            (1, 1, 2),
            "{stats:?}"
        );
        let found = dead_letters_in(&mut dead_stream, 2).await;
        assert_eq!(
            dead_stream.info().await.unwrap().state.messages,
            2,
            "only the rejects"
        );
        assert_eq!(reasons(&found), expected_dead_letters());
        for message in found.values() {
            assert_eq!(message.subject.as_str(), dead_subject);
            assert_eq!(header(message, ORIGINAL_SUBJECT_HEADER), fixture.subject);
            assert_eq!(header(message, ORIGINAL_STREAM_HEADER), fixture.name);
            assert_eq!(header(message, DELIVERY_COUNT_HEADER), "1");
            assert_eq!(
                header(message, NAMESPACE_HEADER),
                consumer.scope().namespace()
            );
        }
        // Third and fourth in the source stream.
        assert_eq!(header(&found["no key"], STREAM_SEQUENCE_HEADER), "3");
        let mismatch = &found["order 1, other amount"];
        assert_eq!(header(mismatch, STREAM_SEQUENCE_HEADER), "4");
        assert_eq!(
            header(mismatch, "business-key"),
            "T1",
            "original headers kept"
        );
        fixture.cleanup().await;
    }

    /// No stream takes the dead-letter subject: the publish gets no acknowledgement, and the
    /// message is `-NAK`ed, not terminated; it comes back until a stream takes the subject,
    /// then it is dead-lettered, once.
    #[tokio::test]
    async fn a_dead_letter_no_stream_takes_is_redelivered_until_one_does() {
        let Some(fixture) = Fixture::new().await else {
            return;
        };
        let dead_subject = format!("idem.parked.{}", fixture.name);
        fixture.publish_all().await;
        let consumer = consumer();
        let dead_letters = DeadLetters::to_subject(fixture.js.clone(), dead_subject.clone())
            .with_retry_after(Duration::from_millis(50));
        let (running, pull) = (Arc::clone(&consumer), fixture.pull.clone());
        let task = tokio::spawn(async move {
            let _ = nats::serve_reconnecting(&running, &pull, &dead_letters)
                .concurrency(1)
                .await;
        });
        wait_until(
            "the rejects to come back after failed dead letters",
            LIMIT,
            || consumer.stats().snapshot().rejected >= 4,
        )
        .await;

        let mut dead_stream = fixture.create_dead_stream(&dead_subject).await;
        let found = dead_letters_in(&mut dead_stream, 2).await;
        fixture.wait_settled().await;
        task.abort();

        let stats = consumer.stats().snapshot();
        assert_eq!((stats.processed, stats.replayed), (1, 1), "{stats:?}");
        assert_eq!(
            dead_stream.info().await.unwrap().state.messages,
            2,
            "each once"
        );
        assert_eq!(reasons(&found), expected_dead_letters());
        for message in found.values() {
            let deliveries: u64 = header(message, DELIVERY_COUNT_HEADER).parse().unwrap();
            assert!(
                deliveries > 1,
                "dead-lettered on a redelivery: {deliveries}"
            );
        }
        fixture.cleanup().await;
    }
}
