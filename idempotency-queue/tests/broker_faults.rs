//! Consumers across broker outages: the consumer reaches RabbitMQ (`AMQP_URL`) or NATS
//! (`NATS_URL`) through a fault proxy, which refuses it for two seconds, or resets its
//! connection every 200 ms, while the producer (directly connected) keeps publishing every
//! message twice. The consumer reconnects by itself (`rabbitmq::serve_reconnecting`,
//! `nats::serve_reconnecting`); every message is settled in the end, and every key ran once,
//! although acks were lost with their connections and their messages redelivered.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use idempotency_core::{Idempotency, MemoryStore, Scope};
use idempotency_queue::{Header, IdempotentConsumer, Job};
use idempotency_test::{FaultProxy, LinkFault};
use support::{Ledger, unique, wait_until};

const LIMIT: Duration = Duration::from_secs(90);
/// Keys published before, during and after the fault; each twice.
const KEYS_PER_PHASE: usize = 40;

/// How the link fails.
#[derive(Clone, Copy, Debug)]
enum Outage {
    /// Refused (open connections reset) for two seconds.
    Refused,
    /// Every connection reset every 200 ms for two seconds.
    Resets,
}

impl Outage {
    async fn run(self, proxy: &FaultProxy) {
        match self {
            Self::Refused => {
                proxy.set(LinkFault::Refuse);
                tokio::time::sleep(Duration::from_secs(2)).await;
                proxy.set(LinkFault::None);
            }
            Self::Resets => {
                for _ in 0..10 {
                    proxy.reset();
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }
}

/// `host:port` of a broker URL.
fn host_port(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, rest)| rest);
    rest.split(['/', '?']).next().unwrap_or(rest)
}

/// A consumer of its own, its handler taking 10 ms (so that some runs are cut by the fault).
fn consumer(
    ledger: &Ledger,
) -> Arc<IdempotentConsumer<MemoryStore, Header, impl idempotency_queue::Handler + use<>>> {
    let recorded = ledger.clone();
    Arc::new(IdempotentConsumer::new(
        Idempotency::new(MemoryStore::new()),
        Scope::new(unique("broker-faults")),
        Header::new("business-key"),
        move |job: Job| {
            let recorded = recorded.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(10)).await;
                recorded.record(&job);
                Ok::<_, String>(())
            }
        },
    ))
}

/// Every key of the run ran exactly once.
fn ran_once(ledger: &Ledger, keys: &[String]) {
    for key in keys {
        assert_eq!(ledger.runs(key), 1, "{key} ran {} times", ledger.runs(key));
    }
    assert_eq!(ledger.total(), keys.len());
}

/// Publishes [`KEYS_PER_PHASE`] keys, each twice (`publish` sends one copy), before, during
/// and after `outage`; returns the keys.
async fn publish_through<F, Fut>(
    prefix: &str,
    outage: Outage,
    proxy: &FaultProxy,
    mut publish: F,
) -> Vec<String>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut keys = Vec::new();
    for phase in 0..3 {
        let fault = async {
            if phase == 1 {
                outage.run(proxy).await;
            }
        };
        let phase_keys: Vec<String> = (0..KEYS_PER_PHASE)
            .map(|n| format!("{prefix}-{phase}-{n}"))
            .collect();
        let published = async {
            for key in &phase_keys {
                publish(key.clone()).await;
                publish(key.clone()).await;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::join!(fault, published);
        keys.extend(phase_keys);
    }
    keys
}

#[cfg(feature = "rabbitmq")]
mod rabbitmq {
    use super::*;
    use idempotency_queue::rabbitmq;
    use lapin::options::{
        BasicConsumeOptions, BasicQosOptions, ExchangeDeleteOptions, QueueDeclareOptions,
        QueueDeleteOptions,
    };
    use lapin::types::FieldTable;
    use lapin::{Connection, ConnectionProperties};
    use support::amqp::{publish, ready};

    fn url() -> String {
        std::env::var("AMQP_URL")
            .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
    }

    async fn survives(outage: Outage) {
        let url = url();
        let connection = match Connection::connect(&url, ConnectionProperties::default()).await {
            Ok(connection) => connection,
            Err(error) => {
                idempotency_test::unavailable::<()>("RabbitMQ", error);
                return;
            }
        };
        let channel = connection.create_channel().await.unwrap();
        let queue = unique("idem-broker-faults");
        channel
            .queue_declare(
                queue.as_str().into(),
                QueueDeclareOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        let proxy = FaultProxy::start(host_port(&url)).await.unwrap();
        let proxied = url.replacen(host_port(&url), &proxy.addr().to_string(), 1);

        let ledger = Ledger::default();
        let consumer = consumer(&ledger);
        let task = tokio::spawn({
            let (consumer, queue) = (Arc::clone(&consumer), queue.clone());
            async move {
                let open = || {
                    let (url, queue) = (proxied.clone(), queue.clone());
                    async move {
                        let connection =
                            Connection::connect(&url, ConnectionProperties::default()).await?;
                        let channel = connection.create_channel().await?;
                        channel.basic_qos(16, BasicQosOptions::default()).await?;
                        // Declared again by every session, on its own connection.
                        let dead_letters =
                            rabbitmq::DeadLetters::declare(&connection, &queue).await?;
                        let deliveries = channel
                            .basic_consume(
                                queue.as_str().into(),
                                "faulty".into(),
                                BasicConsumeOptions::default(),
                                FieldTable::default(),
                            )
                            .await?;
                        Ok(rabbitmq::Session {
                            connection,
                            deliveries,
                            dead_letters,
                        })
                    }
                };
                let _ = rabbitmq::serve_reconnecting(&consumer, open)
                    .concurrency(8)
                    .await;
            }
        });

        let keys = publish_through(&queue, outage, &proxy, |key| {
            let (channel, queue) = (&channel, &queue);
            async move { publish(channel, queue, key.as_str(), &key).await }
        })
        .await;
        wait_until("every key to run", LIMIT, || ledger.keys() == keys.len()).await;
        let deadline = tokio::time::Instant::now() + LIMIT;
        while ready(&channel, &queue).await > 0
            || consumer.stats().snapshot().acked() < 2 * keys.len() as u64
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "messages left unsettled: {:?}",
                consumer.stats().snapshot()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        task.abort();
        ran_once(&ledger, &keys);
        let dead = rabbitmq::dead_letter_name(&queue);
        assert_eq!(ready(&channel, &dead).await, 0, "nothing was rejected");
        for queue in [&queue, &dead] {
            channel
                .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
                .await
                .unwrap();
        }
        channel
            .exchange_delete(dead.as_str().into(), ExchangeDeleteOptions::default())
            .await
            .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rabbitmq_consumer_comes_back_after_refusal() {
        survives(Outage::Refused).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rabbitmq_consumer_comes_back_after_resets() {
        survives(Outage::Resets).await;
    }
}

#[cfg(feature = "nats")]
mod nats {
    use super::*;
    use async_nats::HeaderMap;
    use async_nats::jetstream::{self, consumer::pull, stream};
    use idempotency_queue::nats;

    fn url() -> String {
        std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned())
    }

    async fn survives(outage: Outage) {
        let url = url();
        let client = match async_nats::connect(&url).await {
            Ok(client) => client,
            Err(error) => {
                idempotency_test::unavailable::<()>("NATS", error);
                return;
            }
        };
        let js = jetstream::new(client);
        let name = unique("IDEM-FAULTS");
        let subject = format!("idem.faults.{name}");
        js.create_stream(stream::Config {
            name: name.clone(),
            subjects: vec![subject.clone()],
            ..Default::default()
        })
        .await
        .unwrap();

        let proxy = FaultProxy::start(host_port(&url)).await.unwrap();
        let proxied = url.replacen(host_port(&url), &proxy.addr().to_string(), 1);
        let consuming = jetstream::new(async_nats::connect(&proxied).await.unwrap());
        let pull = consuming
            .get_stream(&name)
            .await
            .unwrap()
            .get_or_create_consumer(
                "faulty",
                pull::Config {
                    durable_name: Some("faulty".to_owned()),
                    // A lost ack is redelivered after this.
                    ack_wait: Duration::from_secs(2),
                    ..Default::default()
                },
            )
            .await
            .unwrap();

        let dead_subject = format!("{subject}.dead");
        js.create_stream(stream::Config {
            name: format!("{name}-DEAD"),
            subjects: vec![dead_subject.clone()],
            ..Default::default()
        })
        .await
        .unwrap();
        let dead_letters = nats::DeadLetters::to_subject(consuming.clone(), dead_subject);

        let ledger = Ledger::default();
        let consumer = consumer(&ledger);
        let task = tokio::spawn({
            let consumer = Arc::clone(&consumer);
            async move {
                let _ = nats::serve_reconnecting(&consumer, &pull, &dead_letters)
                    .concurrency(8)
                    .await;
            }
        });

        let keys = publish_through(&name, outage, &proxy, |key| {
            let (js, subject) = (&js, &subject);
            async move {
                let mut headers = HeaderMap::new();
                headers.insert("business-key", key.as_str());
                js.publish_with_headers(subject.clone(), headers, key.into())
                    .await
                    .unwrap()
                    .await
                    .unwrap();
            }
        })
        .await;
        wait_until("every key to run", LIMIT, || ledger.keys() == keys.len()).await;
        let expected = 2 * keys.len() as u64;
        let deadline = tokio::time::Instant::now() + LIMIT;
        loop {
            let info = js.get_stream(&name).await.unwrap();
            let consumer_info = info.consumer_info("faulty").await.unwrap();
            let settled = consumer_info.num_pending == 0 && consumer_info.num_ack_pending == 0;
            if settled && consumer.stats().snapshot().acked() >= expected {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "messages left unsettled: {consumer_info:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        task.abort();
        ran_once(&ledger, &keys);
        js.delete_stream(&name).await.unwrap();
        js.delete_stream(format!("{name}-DEAD")).await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn nats_consumer_comes_back_after_refusal() {
        survives(Outage::Refused).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn nats_consumer_comes_back_after_resets() {
        survives(Outage::Resets).await;
    }
}
