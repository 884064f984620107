//! Two tiers against real services: Redis (fast path), PostgreSQL (truth), NATS JetStream
//! (deliveries). The JetStream twin of `two_tier.rs`.
//!
//! The business table has no unique constraint on the business key, so a second execution would
//! show up as a second row: every test counts rows.
#![cfg(all(feature = "nats", feature = "sql"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
#[allow(dead_code)] // The round-trip count's proxied fast tier serves `round_trips.rs`.
mod tiers;

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, consumer::pull, stream};
use idempotency_core::Scope;
use idempotency_queue::two_tier::TwoTier;
use idempotency_queue::{Backoff, Header, IdempotentConsumer, nats};
use support::{unique, wait_until};
use tiers::Tiers;
use tokio::io::{AsyncBufReadExt, BufReader};

const LIMIT: Duration = Duration::from_secs(90);
/// The Redis database the flush test empties; nothing else should live there (`two_tier.rs`
/// flushes database 9).
const FLUSHED_DB: u8 = 10;
/// The durable consumer's name, in a stream of its own per test.
const DURABLE: &str = "granter";
/// How long JetStream waits for an ack before redelivering: short, so a killed consumer's
/// message comes back quickly.
const ACK_WAIT: Duration = Duration::from_secs(2);

fn nats_url() -> String {
    std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned())
}

/// Everything one test needs, under names no other test uses: the tiers and a stream.
struct Fixture {
    tiers: Tiers,
    js: jetstream::Context,
    stream: stream::Stream,
    stream_name: String,
    subject: String,
}

impl Fixture {
    async fn new(redis_db: u8) -> Option<Self> {
        let client = match async_nats::connect(nats_url()).await {
            Ok(client) => client,
            Err(error) => return idempotency_test::unavailable("NATS", error),
        };
        let tiers = Tiers::new(redis_db, "idem-two-tier-nats").await?;
        let js = jetstream::new(client);
        let stream_name = unique("IDEM-TWO-TIER");
        let subject = format!("idem.two-tier.{stream_name}");
        let stream = js
            .create_stream(stream::Config {
                name: stream_name.clone(),
                subjects: vec![subject.clone()],
                ..Default::default()
            })
            .await
            .unwrap();
        Some(Self {
            tiers,
            js,
            stream,
            stream_name,
            subject,
        })
    }

    /// The fixture of a child process, from the parent's environment.
    async fn from_env() -> Self {
        let var = |name: &str| std::env::var(name).unwrap();
        let js = jetstream::new(async_nats::connect(nats_url()).await.unwrap());
        let stream_name = var("IDEM_STREAM");
        Self {
            tiers: Tiers::from_env().await,
            stream: js.get_stream(&stream_name).await.unwrap(),
            js,
            stream_name,
            subject: var("IDEM_SUBJECT"),
        }
    }

    /// Publishes a grant for `key`; the same key always has the same payload.
    async fn publish(&self, key: &str) {
        let mut headers = HeaderMap::new();
        headers.insert("business-key", key);
        self.js
            .publish_with_headers(
                self.subject.clone(),
                headers,
                format!("grant a coupon for {key}").into(),
            )
            .await
            .unwrap()
            .await
            .unwrap();
    }

    /// The messages of the stream's durable consumer (created on first use).
    async fn messages(&self) -> pull::Stream {
        self.stream
            .get_or_create_consumer(
                DURABLE,
                pull::Config {
                    durable_name: Some(DURABLE.to_owned()),
                    ack_wait: ACK_WAIT,
                    ..Default::default()
                },
            )
            .await
            .unwrap()
            .messages()
            .await
            .unwrap()
    }

    async fn cleanup(self) {
        self.js.delete_stream(&self.stream_name).await.unwrap();
        self.tiers.drop_tables().await;
    }
}

#[tokio::test]
async fn a_redis_flush_mid_run_costs_queries_never_a_second_execution() {
    let Some(fixture) = Fixture::new(FLUSHED_DB).await else {
        return;
    };
    let consumer = Arc::new(
        TwoTier::new(fixture.tiers.truth())
            .consumer(fixture.tiers.fast_path().await, Header::new("business-key"))
            .unwrap()
            .with_backoff(Backoff::new(
                Duration::from_millis(50),
                Duration::from_millis(500),
            )),
    );
    let keys: Vec<String> = (0..20).map(|n| format!("T{n}")).collect();
    let messages = fixture.messages().await;
    let running = Arc::clone(&consumer);
    let task = tokio::spawn(async move {
        let _ = nats::serve(&running, messages, &nats::DeadLetters::drop_and_log())
            .concurrency(8)
            .await;
    });

    // Round 1: every key three times.
    for _ in 0..3 {
        for key in &keys {
            fixture.publish(key).await;
        }
    }
    wait_until("round 1 acked", LIMIT, || {
        consumer.stats().snapshot().acked() == 60
    })
    .await;
    assert_eq!(fixture.tiers.rows(None).await, 20);

    // Redis loses everything: every key's next delivery finds no fast-path record.
    fixture.tiers.flush_redis(FLUSHED_DB).await;
    // Round 2: every key three times again, with another flush in the middle of the run.
    for round in 0..3 {
        for key in &keys {
            fixture.publish(key).await;
        }
        if round == 1 {
            fixture.tiers.flush_redis(FLUSHED_DB).await;
        }
    }
    wait_until("round 2 acked", LIMIT, || {
        consumer.stats().snapshot().acked() == 120
    })
    .await;
    task.abort();

    for key in &keys {
        assert_eq!(fixture.tiers.rows(Some(key)).await, 1, "{key} granted once");
    }
    assert_eq!(fixture.tiers.rows(None).await, 20);
    let stats = consumer.stats().snapshot();
    assert_eq!(stats.processed, 20, "{stats:?}");
    // At least one SQL answer per key after the first flush: the cost of the miss.
    assert!(stats.already_done >= 20, "{stats:?}");
    assert_eq!(stats.acked(), 120, "no delivery acked twice: {stats:?}");
    fixture.cleanup().await;
}

/// Where the child process stops (and is killed with SIGKILL).
const CHILD_MODE: &str = "IDEM_CHILD_MODE";

/// The child: consumes the stream; the business transaction hangs before commit (`in_tx`) or
/// the handler hangs after commit, before the fast path is completed and the message acked
/// (`after_commit`). It prints a marker, then waits to be killed.
async fn child(mode: String) {
    let fixture = Fixture::from_env().await;
    // A fast-path lease far longer than the test waits: the redelivery must not wait it out.
    let consumer = IdempotentConsumer::new(
        fixture
            .tiers
            .fast_path_leased(Duration::from_secs(600))
            .await,
        Scope::new("coupon-grant"),
        Header::new("business-key"),
        fixture.tiers.hanging_handler(mode),
    );
    // One at a time: JetStream redelivers T1 to the hung child after ACK_WAIT; it waits its turn.
    let _ = nats::serve(
        &consumer,
        fixture.messages().await,
        &nats::DeadLetters::drop_and_log(),
    )
    .concurrency(1)
    .await;
}

#[tokio::test]
async fn a_consumer_killed_with_sigkill_mid_message_processes_it_once_after_restart() {
    if let Ok(mode) = std::env::var(CHILD_MODE) {
        return child(mode).await;
    }
    for mode in ["in_tx", "after_commit"] {
        let Some(fixture) = Fixture::new(0).await else {
            return;
        };
        fixture.publish("T1").await;

        let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_consumer_killed_with_sigkill_mid_message_processes_it_once_after_restart",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_MODE, mode)
            .env("IDEM_STREAM", &fixture.stream_name)
            .env("IDEM_SUBJECT", &fixture.subject)
            .envs(fixture.tiers.child_env())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let marker = format!("CHILD-READY {mode}");
        tokio::time::timeout(LIMIT, async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if line.contains(&marker) {
                    return;
                }
            }
            panic!("the child exited before reaching {mode}");
        })
        .await
        .expect("the child reaches its kill point");
        child.kill().await.unwrap(); // SIGKILL: no destructor, no rollback, no release, no ack.
        let expected_before = if mode == "in_tx" { 0 } else { 1 };
        assert_eq!(
            fixture.tiers.rows(Some("T1")).await,
            expected_before,
            "{mode}: committed rows at the kill"
        );

        // Restart: a new consumer on the same durable, Redis prefix and tables. JetStream
        // redelivers the un-acked T1 after ACK_WAIT; the dead owner's Redis claim holds for 10
        // minutes, so the fast tier answers "in flight" and the truth decides at once.
        let consumer = Arc::new(
            IdempotentConsumer::new(
                fixture.tiers.fast_path().await,
                Scope::new("coupon-grant"),
                Header::new("business-key"),
                fixture.tiers.truth(),
            )
            .with_backoff(Backoff::new(
                Duration::from_millis(100),
                Duration::from_secs(1),
            )),
        );
        let messages = fixture.messages().await;
        let running = Arc::clone(&consumer);
        let task = tokio::spawn(async move {
            let _ = nats::serve(&running, messages, &nats::DeadLetters::drop_and_log())
                .concurrency(4)
                .await;
        });
        wait_until("the redelivery to be settled", LIMIT, || {
            consumer.stats().snapshot().acked() == 1
        })
        .await;
        fixture.publish("T1").await;
        wait_until("a late duplicate to be acked", LIMIT, || {
            consumer.stats().snapshot().acked() == 2
        })
        .await;
        task.abort();

        let stats = consumer.stats().snapshot();
        assert_eq!(
            stats.in_flight, 0,
            "{mode}: the dead consumer's fast-tier claim never requeued the redelivery: {stats:?}"
        );
        if mode == "in_tx" {
            assert_eq!(
                stats.processed, 1,
                "{mode}: the rolled-back work runs once: {stats:?}"
            );
        } else {
            assert_eq!(
                stats.processed, 0,
                "{mode}: committed work is not run again: {stats:?}"
            );
        }
        // The truth answers the redelivery (after commit: done; in the transaction: it runs
        // the rolled-back work) and settles the dead consumer's pending claim with its output:
        // the late duplicate replays from the fast tier.
        let answered_by_truth = if mode == "in_tx" { 0 } else { 1 };
        assert_eq!(
            (stats.already_done, stats.replayed),
            (answered_by_truth, 1),
            "{mode}: SQL said done: {stats:?}"
        );
        assert_eq!(
            fixture.tiers.rows(Some("T1")).await,
            1,
            "{mode}: one coupon"
        );
        fixture.cleanup().await;
    }
}
