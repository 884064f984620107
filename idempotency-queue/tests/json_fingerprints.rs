//! Byte-different copies of one event against real RabbitMQ: with a JSON-fields fingerprint a
//! re-serialised, re-signed, re-timed copy is a duplicate, a conflicting copy (another amount)
//! is acked as a conflict and counted, never dead-lettered, unless dead-lettering it is asked.
#![cfg(feature = "rabbitmq")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idempotency_core::{Idempotency, MemoryStore, Scope};
use idempotency_queue::rabbitmq::{self, DeadLetters, dead_letter_name};
use idempotency_queue::{Handler, IdempotentConsumer, Job, JsonField, OnConflict};
use lapin::options::{BasicConsumeOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};
use support::amqp::{publish, ready};
use support::{unique, wait_until};

const LIMIT: Duration = Duration::from_secs(60);

const PAID: &str = r#"{"trade_no":"T1","trade_status":"TRADE_SUCCESS","total_amount":"8.80","notify_time":"2026-12-04 10:00:00","sign":"aaa"}"#;
/// The gateway's retry: fields in another order, other spacing, a new `notify_time` and `sign`.
const RESENT: &str = r#"{ "sign": "bbb", "notify_time": "2026-12-04 10:04:00",
  "total_amount": "8.80", "trade_status": "TRADE_SUCCESS", "trade_no": "T1" }"#;
/// Same trade and status, another amount.
const CONFLICTING: &str =
    r#"{"trade_no":"T1","trade_status":"TRADE_SUCCESS","total_amount":"9.99"}"#;

fn url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

/// Publishes the three copies to a fresh queue, consumes them with `consumer` until all three
/// are settled and `dead_letters` copies are in the dead-letter queue (a copy is confirmed
/// there before its original is acked); returns (handler runs, dead letters).
async fn run(
    connection: &Connection,
    dead_letters_expected: u32,
    consumer: impl FnOnce(
        Arc<AtomicUsize>,
    ) -> IdempotentConsumer<MemoryStore, JsonField, Box<dyn DynHandler>>,
) -> (
    usize,
    u32,
    Arc<IdempotentConsumer<MemoryStore, JsonField, Box<dyn DynHandler>>>,
) {
    let channel = connection.create_channel().await.unwrap();
    let queue = unique("idem-json-fp");
    channel
        .queue_declare(
            queue.as_str().into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let dead_letters = DeadLetters::declare(connection, &queue).await.unwrap();
    for body in [PAID, RESENT, CONFLICTING] {
        publish(&channel, &queue, None, body).await;
    }
    let runs = Arc::new(AtomicUsize::new(0));
    let consumer = Arc::new(consumer(Arc::clone(&runs)));
    let deliveries = channel
        .basic_consume(
            queue.as_str().into(),
            "json-fp".into(),
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
    let settled = |c: &IdempotentConsumer<_, _, _>| {
        let s = c.stats().snapshot();
        s.acked() + s.rejected
    };
    wait_until("three settled copies", LIMIT, || settled(&consumer) == 3).await;
    consuming.abort();
    let dead = dead_letter_name(&queue);
    let deadline = std::time::Instant::now() + LIMIT;
    let mut dead_count = ready(&channel, &dead).await;
    while dead_count < dead_letters_expected && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        dead_count = ready(&channel, &dead).await;
    }
    for name in [&queue, &dead] {
        channel
            .queue_delete(name.as_str().into(), QueueDeleteOptions::default())
            .await
            .unwrap();
    }
    (runs.load(Ordering::SeqCst), dead_count, consumer)
}

/// A handler object, so that both tests name one consumer type.
trait DynHandler: Send + Sync + 'static {
    fn call(&self, job: Job) -> futures_util::future::BoxFuture<'static, Result<(), String>>;
}

impl<
    F: Fn(Job) -> futures_util::future::BoxFuture<'static, Result<(), String>> + Send + Sync + 'static,
> DynHandler for F
{
    fn call(&self, job: Job) -> futures_util::future::BoxFuture<'static, Result<(), String>> {
        self(job)
    }
}

impl Handler for Box<dyn DynHandler> {
    type Error = String;
    async fn handle(&self, job: Job) -> Result<idempotency_queue::Handled, String> {
        self.call(job).await.map(Into::into)
    }
}

fn counting(runs: Arc<AtomicUsize>) -> Box<dyn DynHandler> {
    Box::new(move |_job: Job| {
        runs.fetch_add(1, Ordering::SeqCst);
        let done: futures_util::future::BoxFuture<'static, Result<(), String>> =
            Box::pin(async { Ok(()) });
        done
    })
}

async fn connect() -> Option<Connection> {
    match Connection::connect(&url(), ConnectionProperties::default()).await {
        Ok(connection) => Some(connection),
        Err(error) => idempotency_test::unavailable("RabbitMQ", error),
    }
}

fn fingerprinted(
    runs: Arc<AtomicUsize>,
) -> IdempotentConsumer<MemoryStore, JsonField, Box<dyn DynHandler>> {
    IdempotentConsumer::new(
        Idempotency::new(MemoryStore::new()),
        Scope::new(unique("trade-notify")),
        JsonField::new("/trade_no"),
        counting(runs),
    )
    .fingerprint_json_fields(["/trade_no", "/trade_status", "/total_amount"])
}

#[tokio::test]
async fn a_resent_copy_is_a_duplicate_and_a_conflicting_one_is_acked_not_dead_lettered() {
    let Some(connection) = connect().await else {
        return;
    };
    let (runs, dead, consumer) = run(&connection, 0, fingerprinted).await;
    let stats = consumer.stats().snapshot();
    assert_eq!(runs, 1, "{stats:?}");
    assert_eq!(
        (stats.processed, stats.replayed, stats.conflicts),
        (1, 1, 1),
        "{stats:?}"
    );
    assert_eq!(dead, 0, "nothing dead-lettered");
}

#[tokio::test]
async fn dead_lettering_a_conflicting_copy_is_one_setting() {
    let Some(connection) = connect().await else {
        return;
    };
    let (runs, dead, consumer) = run(&connection, 1, |runs| {
        fingerprinted(runs).on_conflict(OnConflict::DeadLetter)
    })
    .await;
    let stats = consumer.stats().snapshot();
    assert_eq!(runs, 1, "{stats:?}");
    assert_eq!(
        (stats.replayed, stats.conflicts, stats.rejected),
        (1, 0, 1),
        "{stats:?}"
    );
    assert_eq!(dead, 1, "the conflicting copy is dead-lettered");
}

#[tokio::test]
async fn without_named_fields_a_resent_copy_is_dead_lettered_as_a_mismatch() {
    let Some(connection) = connect().await else {
        return;
    };
    let (runs, dead, consumer) = run(&connection, 2, |runs| {
        IdempotentConsumer::new(
            Idempotency::new(MemoryStore::new()),
            Scope::new(unique("trade-notify")),
            JsonField::new("/trade_no"),
            counting(runs),
        )
    })
    .await;
    assert_eq!(runs, 1);
    assert_eq!(consumer.stats().snapshot().rejected, 2);
    assert_eq!(dead, 2);
}
