//! Two tiers against real services: Redis (fast path), PostgreSQL (truth), NATS JetStream
//! (deliveries). The JetStream twin of `two_tier.rs`.
//!
//! The business table has no unique constraint on the business key, so a second execution would
//! show up as a second row: every test counts rows.
#![cfg(all(feature = "nats", feature = "sql"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::type_complexity)]

mod support;

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, consumer::pull, stream};
use futures_util::future::BoxFuture;
use idempotency_core::redis::RedisStore;
use idempotency_core::sql::PostgresStore;
use idempotency_core::{Idempotency, Scope};
use idempotency_queue::two_tier::SqlTruth;
use idempotency_queue::{Backoff, Handler, Header, IdempotentConsumer, Job, nats};
use sqlx::PgPool;
use support::{unique, wait_until};
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

fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

fn redis_url(db: u8) -> String {
    let base = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let base = base.trim_end_matches('/');
    // Replace any database number in REDIS_URL with ours.
    let host = match base.rsplit_once('/') {
        Some((head, tail)) if !head.ends_with('/') && tail.chars().all(|c| c.is_ascii_digit()) => {
            head
        }
        _ => base,
    };
    format!("{host}/{db}")
}

/// Everything one test needs, under names no other test uses.
struct Fixture {
    js: jetstream::Context,
    stream: stream::Stream,
    stream_name: String,
    subject: String,
    pool: PgPool,
    dedup_table: String,
    coupons_table: String,
    redis_db: u8,
    redis_prefix: String,
}

impl Fixture {
    async fn new(redis_db: u8) -> Option<Self> {
        let client = match async_nats::connect(nats_url()).await {
            Ok(client) => client,
            Err(error) => return idempotency_core::testing::unavailable("NATS", error),
        };
        if let Err(error) = RedisStore::connect(&redis_url(redis_db)).await {
            return idempotency_core::testing::unavailable("Redis", error);
        }
        let pool = match PgPool::connect(&database_url()).await {
            Ok(pool) => pool,
            Err(error) => return idempotency_core::testing::unavailable("PostgreSQL", error),
        };
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
        let id = unique("t").replace('-', "_");
        let fixture = Self {
            js,
            stream,
            stream_name,
            subject,
            pool,
            dedup_table: format!("dedup_{id}"),
            coupons_table: format!("coupons_{id}"),
            redis_db,
            redis_prefix: unique("idem-two-tier-nats"),
        };
        fixture.truth_store().migrate().await.unwrap();
        sqlx::query(&format!(
            "CREATE TABLE {} (id BIGSERIAL PRIMARY KEY, business_key TEXT NOT NULL)",
            fixture.coupons_table
        ))
        .execute(&fixture.pool)
        .await
        .unwrap();
        Some(fixture)
    }

    /// The fixture of a child process, from the parent's environment.
    async fn from_env() -> Self {
        let var = |name: &str| std::env::var(name).unwrap();
        let js = jetstream::new(async_nats::connect(nats_url()).await.unwrap());
        let stream_name = var("IDEM_STREAM");
        Self {
            stream: js.get_stream(&stream_name).await.unwrap(),
            js,
            stream_name,
            subject: var("IDEM_SUBJECT"),
            pool: PgPool::connect(&database_url()).await.unwrap(),
            dedup_table: var("IDEM_DEDUP"),
            coupons_table: var("IDEM_COUPONS"),
            redis_db: var("IDEM_REDIS_DB").parse().unwrap(),
            redis_prefix: var("IDEM_PREFIX"),
        }
    }

    fn truth_store(&self) -> PostgresStore {
        PostgresStore::new(self.pool.clone())
            .with_table_name(&self.dedup_table)
            .unwrap()
            .with_tx_lease(Duration::from_secs(2))
    }

    async fn fast_path(&self) -> Idempotency<RedisStore> {
        let redis = RedisStore::connect(&redis_url(self.redis_db))
            .await
            .unwrap()
            .with_key_prefix(self.redis_prefix.clone());
        Idempotency::new(redis)
            .with_lease(Duration::from_secs(2))
            .with_ttl(Duration::from_secs(600))
    }

    fn truth(
        &self,
    ) -> SqlTruth<
        PostgresStore,
        impl for<'c> Fn(
            &'c mut sqlx::Transaction<'static, sqlx::Postgres>,
            &'c Job,
        ) -> BoxFuture<'c, Result<(), sqlx::Error>>
        + Send
        + Sync
        + 'static,
    > {
        let insert = format!(
            "INSERT INTO {} (business_key) VALUES ($1)",
            self.coupons_table
        );
        SqlTruth::new(
            self.truth_store(),
            self.pool.clone(),
            Scope::new("coupon-grant"),
            move |tx, job: &Job| {
                let insert = insert.clone();
                Box::pin(async move {
                    sqlx::query(&insert)
                        .bind(job.key.as_str())
                        .execute(&mut **tx)
                        .await
                        .map(drop)
                })
            },
        )
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

    /// Business rows, for `key` or in all.
    async fn rows(&self, key: Option<&str>) -> i64 {
        sqlx::query_scalar(&format!(
            "SELECT COUNT(*) FROM {} WHERE $1::TEXT IS NULL OR business_key = $1",
            self.coupons_table
        ))
        .bind(key)
        .fetch_one(&self.pool)
        .await
        .unwrap()
    }

    async fn flush_redis(&self) {
        assert_eq!(
            self.redis_db, FLUSHED_DB,
            "only the dedicated database is flushed"
        );
        let client = redis::Client::open(redis_url(self.redis_db)).unwrap();
        let mut connection = client.get_multiplexed_async_connection().await.unwrap();
        let () = redis::cmd("FLUSHDB")
            .query_async(&mut connection)
            .await
            .unwrap();
    }

    async fn cleanup(self) {
        self.js.delete_stream(&self.stream_name).await.unwrap();
        for table in [&self.coupons_table, &self.dedup_table] {
            sqlx::query(&format!("DROP TABLE IF EXISTS {table}"))
                .execute(&self.pool)
                .await
                .unwrap();
        }
    }
}

#[tokio::test]
async fn a_redis_flush_mid_run_costs_queries_never_a_second_execution() {
    let Some(fixture) = Fixture::new(FLUSHED_DB).await else {
        return;
    };
    let consumer = Arc::new(
        IdempotentConsumer::new(
            fixture.fast_path().await,
            Scope::new("coupon-grant"),
            Header::new("business-key"),
            fixture.truth(),
        )
        .with_guarded_handler(true)
        .with_backoff(Backoff::new(
            Duration::from_millis(50),
            Duration::from_millis(500),
        )),
    );
    let keys: Vec<String> = (0..20).map(|n| format!("T{n}")).collect();
    let messages = fixture.messages().await;
    let running = Arc::clone(&consumer);
    let task = tokio::spawn(async move {
        let _ = nats::consume(&running, messages, 8).await;
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
    assert_eq!(fixture.rows(None).await, 20);

    // Redis loses everything: every key's next delivery finds no fast-path record.
    fixture.flush_redis().await;
    // Round 2: every key three times again, with another flush in the middle of the run.
    for round in 0..3 {
        for key in &keys {
            fixture.publish(key).await;
        }
        if round == 1 {
            fixture.flush_redis().await;
        }
    }
    wait_until("round 2 acked", LIMIT, || {
        consumer.stats().snapshot().acked() == 120
    })
    .await;
    task.abort();

    for key in &keys {
        assert_eq!(fixture.rows(Some(key)).await, 1, "{key} granted once");
    }
    assert_eq!(fixture.rows(None).await, 20);
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
    let truth = Arc::new(fixture.truth());
    let table = fixture.coupons_table.clone();
    let hang = move |job: Job| {
        let truth = Arc::clone(&truth);
        let (mode, table) = (mode.clone(), table.clone());
        async move {
            if mode == "in_tx" {
                // The same SQL claim and insert, then stop before commit.
                let mut tx = truth.store().pool().begin().await.unwrap();
                let claim = idempotency_core::sql::TxStore::claim_in_tx(
                    truth.store(),
                    &mut tx,
                    &Scope::new("coupon-grant"),
                    &job.key,
                    &idempotency_core::Fingerprint::of_bytes(job.message.payload()),
                )
                .await
                .unwrap();
                assert!(matches!(claim, idempotency_core::sql::TxClaim::Execute(_)));
                sqlx::query(&format!("INSERT INTO {table} (business_key) VALUES ($1)"))
                    .bind(job.key.as_str())
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                println!("CHILD-READY in_tx");
            } else {
                truth.handle(job).await.map_err(|e| e.to_string())?;
                println!("CHILD-READY after_commit");
            }
            std::future::pending::<Result<(), String>>().await
        }
    };
    let consumer = IdempotentConsumer::new(
        fixture.fast_path().await,
        Scope::new("coupon-grant"),
        Header::new("business-key"),
        hang,
    );
    // One at a time: JetStream redelivers T1 to the hung child after ACK_WAIT; it waits its turn.
    let _ = nats::consume(&consumer, fixture.messages().await, 1).await;
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
            .env("IDEM_DEDUP", &fixture.dedup_table)
            .env("IDEM_COUPONS", &fixture.coupons_table)
            .env("IDEM_REDIS_DB", fixture.redis_db.to_string())
            .env("IDEM_PREFIX", &fixture.redis_prefix)
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
            fixture.rows(Some("T1")).await,
            expected_before,
            "{mode}: committed rows at the kill"
        );

        // Restart: a new consumer on the same durable, Redis prefix and tables. JetStream
        // redelivers the un-acked T1 after ACK_WAIT; the dead owner's Redis lease runs out (2 s)
        // and is taken over; SQL decides.
        let consumer = Arc::new(
            IdempotentConsumer::new(
                fixture.fast_path().await,
                Scope::new("coupon-grant"),
                Header::new("business-key"),
                fixture.truth(),
            )
            .with_backoff(Backoff::new(
                Duration::from_millis(100),
                Duration::from_secs(1),
            )),
        );
        let messages = fixture.messages().await;
        let running = Arc::clone(&consumer);
        let task = tokio::spawn(async move {
            let _ = nats::consume(&running, messages, 4).await;
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
            assert_eq!(stats.already_done, 1, "{mode}: SQL said done: {stats:?}");
        }
        assert_eq!(stats.duplicates, 1, "{mode}: the late duplicate: {stats:?}");
        assert_eq!(fixture.rows(Some("T1")).await, 1, "{mode}: one coupon");
        fixture.cleanup().await;
    }
}
