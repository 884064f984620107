//! Poison messages against the real brokers: a handler that always fails ends, with its last
//! error, in the dead-letter queue (RabbitMQ quorum queue) or stream (NATS JetStream) after the
//! allowed number of deliveries, counted by the broker, instead of being requeued forever.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idempotency_core::{Idempotency, MemoryStore, Scope};
use idempotency_queue::dead_letter::REASON_HEADER;
use idempotency_queue::{Backoff, Header, IdempotentConsumer, Job};
use support::{unique, wait_until};

const LIMIT: Duration = Duration::from_secs(60);
const MAX: u64 = 3;
const EXPECTED_REASON: &str =
    "handler failed on delivery 3, the last allowed: coupon service rejects it";

/// A consumer keyed by `business-key` whose handler always fails, counting its runs.
fn always_failing(
    runs: Arc<AtomicU64>,
) -> Arc<IdempotentConsumer<MemoryStore, Header, impl idempotency_queue::Handler>> {
    Arc::new(
        IdempotentConsumer::new(
            Idempotency::new(MemoryStore::new()),
            Scope::new(unique("poison")),
            Header::new("business-key"),
            move |_job: Job| {
                runs.fetch_add(1, Ordering::SeqCst);
                async { Err::<(), _>("coupon service rejects it".to_owned()) }
            },
        )
        .with_max_deliveries(Some(MAX))
        .with_backoff(Backoff::new(
            Duration::from_millis(10),
            Duration::from_millis(10),
        )),
    )
}

#[cfg(feature = "rabbitmq")]
#[tokio::test]
async fn rabbitmq_classic_a_message_that_always_fails_is_dead_lettered_after_the_allowed_deliveries()
 {
    rabbitmq_poison("classic").await;
}

#[cfg(feature = "rabbitmq")]
#[tokio::test]
async fn rabbitmq_quorum_a_message_that_always_fails_is_dead_lettered_after_the_allowed_deliveries()
{
    rabbitmq_poison("quorum").await;
}

/// A message to a queue of `queue_type` whose handler always fails.
#[cfg(feature = "rabbitmq")]
async fn rabbitmq_poison(queue_type: &str) {
    use idempotency_queue::rabbitmq::{self, DeadLetters, dead_letter_name};
    use lapin::options::{
        BasicConsumeOptions, BasicGetOptions, BasicQosOptions, QueueDeclareOptions,
        QueueDeleteOptions,
    };
    use lapin::types::{AMQPValue, FieldTable};
    use lapin::{Connection, ConnectionProperties};

    let url = std::env::var("AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned());
    let connection = match Connection::connect(&url, ConnectionProperties::default()).await {
        Ok(connection) => connection,
        Err(error) => {
            return idempotency_test::unavailable("RabbitMQ", error).unwrap_or(());
        }
    };
    let channel = connection.create_channel().await.unwrap();
    channel
        .basic_qos(4, BasicQosOptions::default())
        .await
        .unwrap();
    let queue = unique("idem-poison");
    let mut arguments = FieldTable::default();
    arguments.insert(
        "x-queue-type".into(),
        AMQPValue::LongString(queue_type.into()),
    );
    channel
        .queue_declare(
            queue.as_str().into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            arguments,
        )
        .await
        .unwrap();
    let dead_letters = DeadLetters::declare(&connection, &queue).await.unwrap();
    support::amqp::publish(&channel, &queue, "T-poison", "grant").await;

    let runs = Arc::new(AtomicU64::new(0));
    let consumer = always_failing(Arc::clone(&runs));
    let deliveries = channel
        .basic_consume(
            queue.as_str().into(),
            "poison".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let consuming = tokio::spawn({
        let consumer = Arc::clone(&consumer);
        async move {
            rabbitmq::serve(&consumer, deliveries, &dead_letters)
                .concurrency(1)
                .await
        }
    });
    wait_until("the poison message rejected", LIMIT, || {
        consumer.stats().snapshot().rejected == 1
    })
    .await;

    let dead = dead_letter_name(&queue);
    let deadline = std::time::Instant::now() + LIMIT;
    let copy = loop {
        let got = channel
            .basic_get(dead.as_str().into(), BasicGetOptions { no_ack: true })
            .await
            .unwrap();
        if let Some(copy) = got {
            break copy;
        }
        assert!(std::time::Instant::now() < deadline, "no dead letter");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    consuming.abort();
    let headers = copy.delivery.properties.headers().clone().unwrap();
    let reason = headers.inner().get(REASON_HEADER).cloned();
    assert_eq!(
        reason,
        Some(AMQPValue::LongString(EXPECTED_REASON.into())),
        "{headers:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), MAX);
    assert_eq!(consumer.stats().snapshot().failed, MAX - 1);
    // The consuming channel first: a quorum queue is deleted once nothing consumes it.
    channel.close(200, "done".into()).await.unwrap();
    let cleanup = connection.create_channel().await.unwrap();
    for name in [&queue, &dead] {
        cleanup
            .queue_delete(name.as_str().into(), QueueDeleteOptions::default())
            .await
            .unwrap();
    }
}

#[cfg(feature = "nats")]
#[tokio::test]
async fn nats_a_message_that_always_fails_is_dead_lettered_after_the_allowed_deliveries() {
    use async_nats::HeaderMap;
    use async_nats::jetstream::{self, consumer::pull, stream};
    use futures_util::StreamExt;
    use idempotency_queue::nats::{self, DeadLetters};

    let url = std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned());
    let client = match async_nats::connect(&url).await {
        Ok(client) => client,
        Err(error) => return idempotency_test::unavailable("NATS", error).unwrap_or(()),
    };
    let js = jetstream::new(client);
    let name = unique("IDEM-POISON");
    let subject = format!("idem.poison.{name}");
    let source = js
        .create_stream(stream::Config {
            name: name.clone(),
            subjects: vec![subject.clone()],
            ..Default::default()
        })
        .await
        .unwrap();
    let dead_name = format!("{name}-DEAD");
    let dead_subject = format!("idem.poison-dead.{name}");
    let dead_letters = DeadLetters::declare(js.clone(), &dead_name, &dead_subject)
        .await
        .unwrap();
    let mut headers = HeaderMap::new();
    headers.insert("business-key", "T-poison");
    js.publish_with_headers(subject.clone(), headers, "grant".into())
        .await
        .unwrap()
        .await
        .unwrap();

    let runs = Arc::new(AtomicU64::new(0));
    let consumer = always_failing(Arc::clone(&runs));
    let pull = source
        .get_or_create_consumer(
            "poison",
            pull::Config {
                durable_name: Some("poison".to_owned()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let consuming = tokio::spawn({
        let consumer = Arc::clone(&consumer);
        async move {
            nats::serve_pull(&consumer, &pull, &dead_letters)
                .concurrency(1)
                .await
        }
    });
    wait_until("the poison message rejected", LIMIT, || {
        consumer.stats().snapshot().rejected == 1
    })
    .await;

    let mut dead = js.get_stream(&dead_name).await.unwrap();
    let reader = dead
        .get_or_create_consumer(
            "reader",
            pull::Config {
                durable_name: Some("reader".to_owned()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let copy = reader
        .messages()
        .await
        .unwrap()
        .next()
        .await
        .unwrap()
        .unwrap();
    consuming.abort();
    let reason = copy
        .headers
        .as_ref()
        .and_then(|h| h.get(REASON_HEADER))
        .map(|v| v.as_str().to_owned());
    assert_eq!(reason.as_deref(), Some(EXPECTED_REASON));
    assert_eq!(runs.load(Ordering::SeqCst), MAX);
    assert_eq!(consumer.stats().snapshot().failed, MAX - 1);
    assert_eq!(dead.info().await.unwrap().state.messages, 1);
    js.delete_stream(&name).await.unwrap();
    js.delete_stream(&dead_name).await.unwrap();
}
