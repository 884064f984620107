//! The consumer against a real NATS JetStream (NATS_URL, default nats://127.0.0.1:4222).
#![cfg(feature = "nats")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, consumer::pull, stream};
use idempotency_core::{Idempotency, InFlightPolicy, MemoryStore, Scope};
use idempotency_queue::{Backoff, Header, IdempotentConsumer, Job, nats};
use support::{Ledger, unique, wait_until};
use tokio::sync::Notify;

const LIMIT: Duration = Duration::from_secs(60);

/// A JetStream context and a fresh stream with one subject; deleted by [`Fixture::cleanup`].
struct Fixture {
    js: jetstream::Context,
    stream: stream::Stream,
    name: String,
    subject: String,
}

impl Fixture {
    async fn new() -> Option<Self> {
        let url = std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned());
        let client = match async_nats::connect(&url).await {
            Ok(client) => client,
            Err(error) => return idempotency_test::unavailable("NATS", error),
        };
        let js = jetstream::new(client);
        let name = unique("IDEM-TEST");
        let subject = format!("idem.test.{name}");
        let stream = js
            .create_stream(stream::Config {
                name: name.clone(),
                subjects: vec![subject.clone()],
                ..Default::default()
            })
            .await
            .unwrap();
        Some(Self {
            js,
            stream,
            name,
            subject,
        })
    }

    async fn publish(&self, key: &str, body: &str) {
        let mut headers = HeaderMap::new();
        headers.insert("business-key", key);
        self.js
            .publish_with_headers(self.subject.clone(), headers, body.to_owned().into())
            .await
            .unwrap()
            .await
            .unwrap();
    }

    async fn consumer(&self, durable: &str, ack_wait: Duration) -> pull::Stream {
        self.consumer_with(durable, ack_wait, 0).await
    }

    /// A durable pull consumer delivering each message at most `max_deliver` times (0: no limit).
    async fn consumer_with(
        &self,
        durable: &str,
        ack_wait: Duration,
        max_deliver: i64,
    ) -> pull::Stream {
        let consumer = self.pull_consumer(durable, ack_wait, max_deliver).await;
        consumer.messages().await.unwrap()
    }

    /// The pull consumer itself, as [`Fixture::consumer_with`] creates it.
    async fn pull_consumer(
        &self,
        durable: &str,
        ack_wait: Duration,
        max_deliver: i64,
    ) -> jetstream::consumer::PullConsumer {
        self.stream
            .get_or_create_consumer(
                durable,
                pull::Config {
                    durable_name: Some(durable.to_owned()),
                    ack_wait,
                    max_deliver,
                    ..Default::default()
                },
            )
            .await
            .unwrap()
    }

    async fn cleanup(self) {
        self.js.delete_stream(&self.name).await.unwrap();
    }
}

fn spawn_consume<K, H>(
    consumer: Arc<IdempotentConsumer<MemoryStore, K, H>>,
    messages: pull::Stream,
) -> tokio::task::JoinHandle<()>
where
    K: idempotency_queue::KeyExtractor,
    H: idempotency_queue::Handler,
{
    tokio::spawn(async move {
        // These scenarios reject nothing; tests/dead_letters.rs covers rejects.
        let dead_letters = nats::DeadLetters::drop_and_log();
        let _ = nats::serve(&consumer, messages, &dead_letters)
            .concurrency(8)
            .await;
    })
}

/// A consumer on a fresh memory store whose handler runs `work(attempt, job, ledger)` (attempts
/// counted from 0), retrying failures after 50–200 ms; with its ledger and attempt counter.
fn retrying_consumer<F, Fut>(
    work: F,
) -> (
    Arc<IdempotentConsumer<MemoryStore, Header, impl idempotency_queue::Handler>>,
    Ledger,
    Arc<AtomicUsize>,
)
where
    F: Fn(usize, Job, Ledger) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), String>> + Send,
{
    let ledger = Ledger::default();
    let recorded = ledger.clone();
    let attempts = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&attempts);
    let consumer = IdempotentConsumer::new(
        Idempotency::new(MemoryStore::new()),
        Scope::new(unique("coupon-grant")),
        Header::new("business-key"),
        move |job: Job| {
            work(
                counter.fetch_add(1, Ordering::SeqCst),
                job,
                recorded.clone(),
            )
        },
    )
    .with_backoff(Backoff::new(
        Duration::from_millis(50),
        Duration::from_millis(200),
    ));
    (Arc::new(consumer), ledger, attempts)
}

#[tokio::test]
async fn duplicate_publishes_run_the_handler_once_per_key() {
    let Some(fixture) = Fixture::new().await else {
        return;
    };
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
            fixture
                .publish(&format!("T{order}"), &format!("order {order}"))
                .await;
        }
    }
    let task = spawn_consume(
        Arc::clone(&consumer),
        fixture.consumer("granter", Duration::from_secs(30)).await,
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
    fixture.cleanup().await;
}

#[tokio::test]
async fn a_failed_delivery_is_redelivered_and_processed_once() {
    let Some(fixture) = Fixture::new().await else {
        return;
    };
    let (consumer, ledger, attempts) = retrying_consumer(|attempt, job, ledger| async move {
        if attempt < 2 {
            return Err(format!("coupon service down (attempt {attempt})"));
        }
        if job.message.delivery_count() == Some(3) {
            ledger.record(&job);
        }
        Ok(())
    });
    fixture.publish("T1", "order 1").await;
    let task = spawn_consume(
        Arc::clone(&consumer),
        fixture.consumer("granter", Duration::from_secs(30)).await,
    );
    wait_until("the retried delivery to be processed", LIMIT, || {
        consumer.stats().snapshot().processed == 1
    })
    .await;
    fixture.publish("T1", "order 1").await;
    wait_until("the duplicate to be acked", LIMIT, || {
        consumer.stats().snapshot().replayed == 1
    })
    .await;
    task.abort();

    assert_eq!(consumer.stats().snapshot().failed, 2);
    assert_eq!(attempts.load(Ordering::SeqCst), 3);
    assert_eq!(
        ledger.runs("T1"),
        1,
        "processed once, on the third delivery"
    );
    fixture.cleanup().await;
}

/// A consumer whose handler runs 2.5 s and fails the first time, then checks that its message
/// was delivered only twice (no redelivery while it ran) and records the key.
fn slow_then_failing_consumer() -> (
    Arc<IdempotentConsumer<MemoryStore, Header, impl idempotency_queue::Handler>>,
    Ledger,
    Arc<AtomicUsize>,
) {
    retrying_consumer(|attempt, job, ledger| async move {
        if attempt == 0 {
            tokio::time::sleep(Duration::from_millis(2_500)).await;
            return Err("coupon service timed out".to_owned());
        }
        assert_eq!(
            job.message.delivery_count(),
            Some(2),
            "no redelivery while running"
        );
        ledger.record(&job);
        Ok(())
    })
}

/// Waits for [`slow_then_failing_consumer`]'s retry, stops `task` and checks that the handler
/// ran twice (the failure, then the retry) and its key was processed once.
async fn assert_retried_once<H: idempotency_queue::Handler>(
    consumer: &IdempotentConsumer<MemoryStore, Header, H>,
    ledger: &Ledger,
    attempts: &AtomicUsize,
    task: tokio::task::JoinHandle<()>,
) {
    wait_until(
        "the retry after the slow failure to be processed",
        LIMIT,
        || consumer.stats().snapshot().processed == 1,
    )
    .await;
    task.abort();
    let stats = consumer.stats().snapshot();
    assert_eq!((stats.failed, stats.in_flight), (1, 0), "{stats:?}");
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
    assert_eq!(ledger.runs("T1"), 1);
}

/// A handler slower than `ack_wait`: its message is marked in progress while it runs, so it is
/// not redelivered meanwhile, and when the handler then fails, `max_deliver` still has room
/// for the retry. (Without the progress marks, the redelivery during the first run uses up
/// `max_deliver = 2` and the failed message is never delivered again.)
#[tokio::test]
async fn a_slow_handler_keeps_its_message_and_its_failure_is_retried() {
    let Some(fixture) = Fixture::new().await else {
        return;
    };
    let (consumer, ledger, attempts) = slow_then_failing_consumer();
    fixture.publish("T1", "order 1").await;
    let messages = fixture
        .consumer_with("granter", Duration::from_secs(1), 2)
        .await;
    let running = Arc::clone(&consumer);
    let task = tokio::spawn(async move {
        let _ = nats::serve(&running, messages, &nats::DeadLetters::drop_and_log())
            .concurrency(8)
            .progress_every(Duration::from_millis(300))
            .await;
    });
    assert_retried_once(&consumer, &ledger, &attempts, task).await;
    fixture.cleanup().await;
}

/// The same slow handler through `serve_pull`, which reads `ack_wait` (1 s) off the pull
/// consumer and marks the message in progress every third of it. With [`nats::serve`]'s
/// default 10-s interval the message would be redelivered during the 2.5-s run, and with
/// `max_deliver = 2` the failure would never be retried.
#[tokio::test]
async fn serve_pull_marks_progress_within_the_consumers_own_ack_wait() {
    let Some(fixture) = Fixture::new().await else {
        return;
    };
    let (consumer, ledger, attempts) = slow_then_failing_consumer();
    fixture.publish("T1", "order 1").await;
    let pull = fixture
        .pull_consumer("granter", Duration::from_secs(1), 2)
        .await;
    assert_eq!(
        nats::progress_interval(pull.cached_info().config.ack_wait),
        Duration::from_nanos(333_333_333),
    );
    let running = Arc::clone(&consumer);
    let task = tokio::spawn(async move {
        let _ = nats::serve_pull(&running, &pull, &nats::DeadLetters::drop_and_log())
            .concurrency(8)
            .await;
    });
    assert_retried_once(&consumer, &ledger, &attempts, task).await;
    fixture.cleanup().await;
}

#[tokio::test]
async fn an_in_flight_duplicate_is_requeued_then_acked() {
    let Some(fixture) = Fixture::new().await else {
        return;
    };
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
    fixture.publish("T1", "order 1").await;
    fixture.publish("T1", "order 1").await;
    let task = spawn_consume(
        Arc::clone(&consumer),
        fixture.consumer("granter", Duration::from_secs(30)).await,
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
    fixture.cleanup().await;
}

#[tokio::test]
async fn a_consumer_killed_mid_message_is_replaced_and_the_message_processed_once() {
    let Some(fixture) = Fixture::new().await else {
        return;
    };
    let engine = Idempotency::new(MemoryStore::new()).with_lease(Duration::from_secs(2));
    let scope = Scope::new(unique("coupon-grant"));
    let started = Arc::new(Notify::new());
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
    fixture.publish("T1", "order 1").await;
    let ack_wait = Duration::from_secs(2);
    let task = spawn_consume(
        Arc::clone(&doomed),
        fixture.consumer("granter", ack_wait).await,
    );
    started.notified().await;
    task.abort();

    // The replacement reads the same durable consumer; JetStream redelivers after ack_wait.
    let ledger = Ledger::default();
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
    let task = spawn_consume(
        Arc::clone(&replacement),
        fixture.consumer("granter", ack_wait).await,
    );
    wait_until("the redelivery to be processed", LIMIT, || {
        replacement.stats().snapshot().processed == 1
    })
    .await;
    fixture.publish("T1", "order 1").await;
    wait_until("a late duplicate to be acked", LIMIT, || {
        replacement.stats().snapshot().replayed == 1
    })
    .await;
    task.abort();
    assert_eq!(ledger.runs("T1"), 1);
    fixture.cleanup().await;
}

/// Where a graceful-stop test takes its messages from.
#[derive(Clone, Copy, Debug)]
enum Source {
    /// `nats::serve` on the pull consumer's message stream.
    Messages,
    /// `nats::serve_pull`.
    Pull,
    /// `nats::serve_reconnecting`.
    Reconnecting,
}

/// Ten messages, two taken in hand (concurrency 2) by a handler held at a gate, then the
/// shutdown signal: the serve future waits for the two, acks them and returns `Ok` without
/// starting another; the other eight wait for their redelivery.
async fn a_graceful_stop_through(source: Source) {
    let Some(fixture) = Fixture::new().await else {
        return;
    };
    for order in 0..10 {
        fixture.publish(&format!("T{order}"), "paid").await;
    }
    let (consumer, started, gate) = support::gated_consumer();
    let mut pull = fixture
        .pull_consumer("granter", Duration::from_secs(30), 0)
        .await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (taken, signal_taken) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async move {
        let _ = stopped.await;
        let _ = taken.send(());
    };
    let running = {
        let (consumer, pull) = (Arc::clone(&consumer), pull.clone());
        tokio::spawn(async move {
            let dead_letters = nats::DeadLetters::drop_and_log();
            match source {
                Source::Messages => {
                    let messages = pull.messages().await?;
                    nats::serve(&consumer, messages, &dead_letters)
                        .concurrency(2)
                        .with_graceful_shutdown(shutdown)
                        .await
                        .map_err(async_nats::Error::from)
                }
                Source::Pull => {
                    nats::serve_pull(&consumer, &pull, &dead_letters)
                        .concurrency(2)
                        .with_graceful_shutdown(shutdown)
                        .await
                }
                Source::Reconnecting => {
                    nats::serve_reconnecting(&consumer, &pull, &dead_letters)
                        .concurrency(2)
                        .with_graceful_shutdown(shutdown)
                        .await
                }
            }
        })
    };
    wait_until("two messages in hand", LIMIT, || started.total() == 2).await;
    stop.send(()).unwrap();
    signal_taken.await.unwrap();
    assert!(!running.is_finished(), "it waits for the messages in hand");
    gate.add_permits(100);
    tokio::time::timeout(LIMIT, running)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    fixture.js.client().flush().await.unwrap();

    assert_eq!(started.total(), 2, "no message started after the stop");
    // Processed inside the serve future: it returned only once they were done.
    let stats = consumer.stats().snapshot();
    assert_eq!((stats.processed, stats.acked()), (2, 2), "{stats:?}");
    // The two were acked; the other eight wait for their redelivery.
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let info = pull.info().await.unwrap();
        if info.ack_floor.stream_sequence == 2 {
            assert_eq!(
                info.num_pending + info.num_ack_pending as u64,
                8,
                "{info:?}"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the two acks arrive: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    fixture.cleanup().await;
}

#[tokio::test]
async fn a_graceful_stop_of_a_message_stream_finishes_the_messages_in_hand() {
    a_graceful_stop_through(Source::Messages).await;
}

#[tokio::test]
async fn a_graceful_stop_of_a_pull_finishes_the_messages_in_hand() {
    a_graceful_stop_through(Source::Pull).await;
}

#[tokio::test]
async fn a_graceful_stop_of_a_reconnecting_pull_finishes_the_messages_in_hand() {
    a_graceful_stop_through(Source::Reconnecting).await;
}
