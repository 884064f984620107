//! The consumer against a real RabbitMQ (AMQP_URL, default amqp://guest:guest@127.0.0.1:5672).
#![cfg(feature = "rabbitmq")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idempotency_core::{Idempotency, InFlightPolicy, MemoryStore, Scope};
use idempotency_queue::{Backoff, Header, IdempotentConsumer, Job, rabbitmq};
use lapin::options::{
    BasicConsumeOptions, BasicQosOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ConnectionProperties};
use support::amqp::{publish, ready};
use support::{Ledger, unique, wait_until};
use tokio::sync::Notify;

const LIMIT: Duration = Duration::from_secs(60);

async fn connect() -> Option<Connection> {
    match Connection::connect(&url(), ConnectionProperties::default()).await {
        Ok(connection) => Some(connection),
        Err(error) => idempotency_test::unavailable("RabbitMQ", error),
    }
}

/// A fresh durable queue (it survives a consumer's connection closing); deleted by [`cleanup`].
async fn queue(connection: &Connection) -> (Channel, String) {
    let channel = connection.create_channel().await.unwrap();
    let name = unique("idem-queue-test");
    channel
        .queue_declare(
            name.as_str().into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    (channel, name)
}

async fn cleanup(channel: &Channel, queue: &str) {
    channel
        .queue_delete(queue.into(), QueueDeleteOptions::default())
        .await
        .unwrap();
}

async fn deliveries(connection: &Connection, queue: &str, prefetch: u16) -> lapin::Consumer {
    let channel = connection.create_channel().await.unwrap();
    channel
        .basic_qos(prefetch, BasicQosOptions::default())
        .await
        .unwrap();
    channel
        .basic_consume(
            queue.into(),
            unique("consumer").as_str().into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap()
}

fn spawn_consume<K, H>(
    consumer: Arc<IdempotentConsumer<MemoryStore, K, H>>,
    deliveries: lapin::Consumer,
) -> tokio::task::JoinHandle<()>
where
    K: idempotency_queue::KeyExtractor,
    H: idempotency_queue::Handler,
{
    tokio::spawn(async move {
        // These scenarios reject nothing; tests/dead_letters.rs covers rejects.
        let dead_letters = rabbitmq::DeadLetters::drop_and_log();
        let _ = rabbitmq::serve(&consumer, deliveries, &dead_letters)
            .concurrency(8)
            .await;
    })
}

#[tokio::test]
async fn duplicate_publishes_run_the_handler_once_per_key() {
    let Some(connection) = connect().await else {
        return;
    };
    let (channel, queue) = queue(&connection).await;
    let ledger = Ledger::default();
    let recorded = ledger.clone();
    let consumer = Arc::new(IdempotentConsumer::new(
        Idempotency::new(MemoryStore::new()),
        Scope::new(unique("coupon-grant")),
        Header::new("business-key"),
        move |job: Job| {
            recorded.record(&job);
            async { Ok::<_, String>(()) }
        },
    ));
    for _round in 0..4 {
        for order in 0..5 {
            publish(
                &channel,
                &queue,
                format!("T{order}").as_str(),
                &format!("order {order}"),
            )
            .await;
        }
    }
    let task = spawn_consume(
        Arc::clone(&consumer),
        deliveries(&connection, &queue, 16).await,
    );
    wait_until("20 acked deliveries", LIMIT, || {
        consumer.stats().snapshot().acked() == 20
    })
    .await;
    task.abort();

    let stats = consumer.stats().snapshot();
    assert_eq!((stats.processed, stats.replayed), (5, 15));
    assert_eq!(ledger.keys(), 5);
    for order in 0..5 {
        assert_eq!(ledger.runs(&format!("T{order}")), 1);
    }
    cleanup(&channel, &queue).await;
}

#[tokio::test]
async fn a_failed_delivery_is_redelivered_and_processed_once() {
    let Some(connection) = connect().await else {
        return;
    };
    let (channel, queue) = queue(&connection).await;
    let ledger = Ledger::default();
    let recorded = ledger.clone();
    let attempts = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&attempts);
    let consumer = Arc::new(
        IdempotentConsumer::new(
            Idempotency::new(MemoryStore::new()),
            Scope::new(unique("coupon-grant")),
            Header::new("business-key"),
            move |job: Job| {
                let attempt = counter.fetch_add(1, Ordering::SeqCst);
                let recorded = recorded.clone();
                async move {
                    if attempt < 2 {
                        return Err(format!("coupon service down (attempt {attempt})"));
                    }
                    if job.message.redelivered() {
                        recorded.record(&job);
                    }
                    Ok(())
                }
            },
        )
        .with_backoff(Backoff::new(
            Duration::from_millis(50),
            Duration::from_millis(200),
        )),
    );
    publish(&channel, &queue, "T1", "order 1").await;
    let task = spawn_consume(
        Arc::clone(&consumer),
        deliveries(&connection, &queue, 4).await,
    );
    wait_until("the retried delivery to be processed", LIMIT, || {
        consumer.stats().snapshot().processed == 1
    })
    .await;
    // A late duplicate publish is acked without running.
    publish(&channel, &queue, "T1", "order 1").await;
    wait_until("the duplicate to be acked", LIMIT, || {
        consumer.stats().snapshot().replayed == 1
    })
    .await;
    task.abort();

    let stats = consumer.stats().snapshot();
    assert_eq!(stats.failed, 2);
    assert_eq!(attempts.load(Ordering::SeqCst), 3);
    assert_eq!(ledger.runs("T1"), 1);
    cleanup(&channel, &queue).await;
}

#[tokio::test]
async fn an_in_flight_duplicate_is_requeued_then_acked() {
    let Some(connection) = connect().await else {
        return;
    };
    let (channel, queue) = queue(&connection).await;
    let ledger = Ledger::default();
    let recorded = ledger.clone();
    let release = Arc::new(Notify::new());
    let gate = Arc::clone(&release);
    let consumer = Arc::new(
        IdempotentConsumer::new(
            Idempotency::new(MemoryStore::new()).with_lease(Duration::from_secs(2)),
            Scope::new(unique("coupon-grant")),
            Header::new("business-key"),
            move |job: Job| {
                let (recorded, gate) = (recorded.clone(), Arc::clone(&gate));
                async move {
                    gate.notified().await;
                    recorded.record(&job);
                    Ok::<_, String>(())
                }
            },
        )
        .with_in_flight(InFlightPolicy::Reject),
    );
    publish(&channel, &queue, "T1", "order 1").await;
    publish(&channel, &queue, "T1", "order 1").await;
    let task = spawn_consume(
        Arc::clone(&consumer),
        deliveries(&connection, &queue, 4).await,
    );
    wait_until(
        "the second delivery to find the first in flight",
        LIMIT,
        || consumer.stats().snapshot().in_flight >= 1,
    )
    .await;
    release.notify_one();
    wait_until("both deliveries acked", LIMIT, || {
        consumer.stats().snapshot().acked() == 2
    })
    .await;
    task.abort();

    let stats = consumer.stats().snapshot();
    assert_eq!((stats.processed, stats.replayed), (1, 1));
    assert_eq!(ledger.runs("T1"), 1);
    cleanup(&channel, &queue).await;
}

#[tokio::test]
async fn a_consumer_killed_mid_message_is_replaced_and_the_message_processed_once() {
    let Some(publisher) = connect().await else {
        return;
    };
    let (channel, queue) = queue(&publisher).await;
    let engine = Idempotency::new(MemoryStore::new()).with_lease(Duration::from_secs(2));
    let scope = Scope::new(unique("coupon-grant"));
    let ledger = Ledger::default();
    let started = Arc::new(Notify::new());

    // Consumer 1 hangs in the handler, then its task is aborted and its connection closed.
    let doomed_connection = connect().await.unwrap();
    let signal = Arc::clone(&started);
    let doomed = Arc::new(IdempotentConsumer::new(
        engine.clone(),
        scope.clone(),
        Header::new("business-key"),
        move |_job: Job| {
            let signal = Arc::clone(&signal);
            async move {
                signal.notify_one();
                std::future::pending::<Result<(), String>>().await
            }
        },
    ));
    publish(&channel, &queue, "T1", "order 1").await;
    let task = spawn_consume(
        Arc::clone(&doomed),
        deliveries(&doomed_connection, &queue, 1).await,
    );
    started.notified().await;
    task.abort();
    doomed_connection.close(200, "killed".into()).await.unwrap();

    // Consumer 2 (same store, new connection) gets the redelivery.
    let recorded = ledger.clone();
    let replacement = Arc::new(IdempotentConsumer::new(
        engine,
        scope,
        Header::new("business-key"),
        move |job: Job| {
            if job.message.redelivered() {
                recorded.record(&job);
            }
            async { Ok::<_, String>(()) }
        },
    ));
    let connection = connect().await.unwrap();
    let task = spawn_consume(
        Arc::clone(&replacement),
        deliveries(&connection, &queue, 4).await,
    );
    wait_until("the redelivery to be processed", LIMIT, || {
        replacement.stats().snapshot().processed == 1
    })
    .await;
    publish(&channel, &queue, "T1", "order 1").await;
    wait_until("a late duplicate to be acked", LIMIT, || {
        replacement.stats().snapshot().replayed == 1
    })
    .await;
    task.abort();
    assert_eq!(ledger.runs("T1"), 1);
    cleanup(&channel, &queue).await;
}

fn url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

/// Where a graceful-stop test takes its deliveries from.
#[derive(Clone, Copy, Debug)]
enum Source {
    /// `rabbitmq::serve` on one `basic_consume`; the test closes its connection afterwards.
    Deliveries,
    /// `rabbitmq::serve_reconnecting`, which closes the session's connection itself.
    Reconnecting,
}

/// Ten messages, two taken in hand (prefetch 2, concurrency 4) by a handler held at a gate,
/// then the shutdown signal: the stop ends the deliveries at once while those two still have to
/// be acked on their channel. The serve future waits for them, acks them and returns `Ok`; once
/// the connection is closed, the other eight are back in the queue.
async fn a_graceful_stop_through(source: Source) {
    let Some(connection) = connect().await else {
        return;
    };
    let (channel, queue) = queue(&connection).await;
    for order in 0..10 {
        publish(&channel, &queue, format!("T{order}").as_str(), "paid").await;
    }
    let (consumer, started, gate) = support::gated_consumer();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (taken, signal_taken) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async move {
        let _ = stopped.await;
        let _ = taken.send(());
    };
    let running = {
        let (consumer, queue) = (Arc::clone(&consumer), queue.clone());
        tokio::spawn(async move {
            match source {
                Source::Deliveries => {
                    let consuming = Connection::connect(&url(), ConnectionProperties::default())
                        .await
                        .unwrap();
                    let deliveries = deliveries(&consuming, &queue, 2).await;
                    let dead_letters = rabbitmq::DeadLetters::drop_and_log();
                    let served = rabbitmq::serve(&consumer, deliveries, &dead_letters)
                        .concurrency(4)
                        .with_graceful_shutdown(shutdown)
                        .await;
                    consuming.close(200, "stopped".into()).await.unwrap();
                    served
                }
                Source::Reconnecting => {
                    let open = || {
                        let queue = queue.clone();
                        async move {
                            let connection =
                                Connection::connect(&url(), ConnectionProperties::default())
                                    .await?;
                            let deliveries = self::deliveries(&connection, &queue, 2).await;
                            Ok(rabbitmq::Session {
                                connection,
                                deliveries,
                                dead_letters: rabbitmq::DeadLetters::drop_and_log(),
                            })
                        }
                    };
                    rabbitmq::serve_reconnecting(&consumer, open)
                        .concurrency(4)
                        .with_graceful_shutdown(shutdown)
                        .await
                }
            }
        })
    };
    wait_until("two deliveries in hand", LIMIT, || started.total() == 2).await;
    stop.send(()).unwrap();
    signal_taken.await.unwrap();
    assert!(
        !running.is_finished(),
        "it waits for the deliveries in hand"
    );
    gate.add_permits(100);
    tokio::time::timeout(LIMIT, running)
        .await
        .unwrap()
        .unwrap()
        .unwrap();

    assert_eq!(started.total(), 2, "no delivery started after the stop");
    // Processed inside the serve future: it returned only once they were done.
    let stats = consumer.stats().snapshot();
    assert_eq!((stats.processed, stats.acked()), (2, 2), "{stats:?}");
    // The two were acked; the rest is back in the queue for the next consumer.
    let deadline = tokio::time::Instant::now() + LIMIT;
    while ready(&channel, &queue).await != 8 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "8 messages back in the queue"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cleanup(&channel, &queue).await;
}

#[tokio::test]
async fn a_graceful_stop_of_deliveries_finishes_the_ones_in_hand() {
    a_graceful_stop_through(Source::Deliveries).await;
}

#[tokio::test]
async fn a_graceful_stop_of_a_reconnecting_consumer_finishes_the_deliveries_in_hand() {
    a_graceful_stop_through(Source::Reconnecting).await;
}
