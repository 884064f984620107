//! Two tiers against real services: Redis (fast path), PostgreSQL (truth), RabbitMQ (deliveries).
//!
//! The business table has no unique constraint on the business key, so a second execution would
//! show up as a second row: every test counts rows.
#![cfg(all(feature = "rabbitmq", feature = "sql"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::type_complexity)]

mod support;

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use idempotency_core::redis::RedisStore;
use idempotency_core::sql::PostgresStore;
use idempotency_core::{Idempotency, Scope};
use idempotency_queue::two_tier::SqlTruth;
use idempotency_queue::{Backoff, Handler, Header, IdempotentConsumer, Job, rabbitmq};
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, QueueDeclareOptions,
    QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use sqlx::PgPool;
use support::{unique, wait_until};
use tokio::io::{AsyncBufReadExt, BufReader};

const LIMIT: Duration = Duration::from_secs(90);
/// The Redis database the flush test empties; nothing else should live there.
const FLUSHED_DB: u8 = 9;

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
    amqp: Connection,
    channel: Channel,
    queue: String,
    pool: PgPool,
    dedup_table: String,
    coupons_table: String,
    redis_db: u8,
    redis_prefix: String,
}

impl Fixture {
    async fn new(redis_db: u8) -> Option<Self> {
        let amqp_url = std::env::var("AMQP_URL")
            .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned());
        let amqp = match Connection::connect(&amqp_url, ConnectionProperties::default()).await {
            Ok(connection) => connection,
            Err(error) => return idempotency_core::testing::unavailable("RabbitMQ", error),
        };
        if let Err(error) = RedisStore::connect(&redis_url(redis_db)).await {
            return idempotency_core::testing::unavailable("Redis", error);
        }
        let database_url = std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        let pool = match PgPool::connect(&database_url).await {
            Ok(pool) => pool,
            Err(error) => return idempotency_core::testing::unavailable("PostgreSQL", error),
        };
        let channel = amqp.create_channel().await.unwrap();
        let queue = unique("idem-two-tier");
        channel
            .queue_declare(
                queue.as_str().into(),
                QueueDeclareOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        let id = unique("t").replace('-', "_");
        let fixture = Self {
            amqp,
            channel,
            queue,
            pool,
            dedup_table: format!("dedup_{id}"),
            coupons_table: format!("coupons_{id}"),
            redis_db,
            redis_prefix: unique("idem-two-tier"),
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
        let amqp_url = std::env::var("AMQP_URL")
            .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned());
        let amqp = Connection::connect(&amqp_url, ConnectionProperties::default())
            .await
            .unwrap();
        let channel = amqp.create_channel().await.unwrap();
        let database_url = std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        Self {
            amqp,
            channel,
            queue: var("IDEM_QUEUE"),
            pool: PgPool::connect(&database_url).await.unwrap(),
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

    async fn publish(&self, key: &str) {
        let mut headers = FieldTable::default();
        headers.insert(
            "business-key".into(),
            AMQPValue::LongString(LongString::from(key)),
        );
        self.channel
            .basic_publish(
                "".into(),
                self.queue.as_str().into(),
                BasicPublishOptions::default(),
                format!("grant a coupon for {key}").as_bytes(),
                BasicProperties::default().with_headers(headers),
            )
            .await
            .unwrap()
            .await
            .unwrap();
    }

    async fn deliveries(&self, connection: &Connection) -> lapin::Consumer {
        let channel = connection.create_channel().await.unwrap();
        channel
            .basic_qos(16, BasicQosOptions::default())
            .await
            .unwrap();
        channel
            .basic_consume(
                self.queue.as_str().into(),
                unique("consumer").as_str().into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap()
    }

    async fn rows(&self, key: Option<&str>) -> i64 {
        let (sql, key) = match key {
            Some(key) => (
                format!(
                    "SELECT COUNT(*) FROM {} WHERE business_key = $1",
                    self.coupons_table
                ),
                key,
            ),
            None => (
                format!("SELECT COUNT(*) FROM {} WHERE $1 = $1", self.coupons_table),
                "",
            ),
        };
        sqlx::query_scalar(&sql)
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
        self.channel
            .queue_delete(self.queue.as_str().into(), QueueDeleteOptions::default())
            .await
            .unwrap();
        for table in [&self.coupons_table, &self.dedup_table] {
            sqlx::query(&format!("DROP TABLE IF EXISTS {table}"))
                .execute(&self.pool)
                .await
                .unwrap();
        }
        let _ = self.amqp.close(200, "done".into()).await;
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
    let connection = Connection::connect(
        &std::env::var("AMQP_URL")
            .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned()),
        ConnectionProperties::default(),
    )
    .await
    .unwrap();
    let deliveries = fixture.deliveries(&connection).await;
    let running = Arc::clone(&consumer);
    let task = tokio::spawn(async move {
        let _ = rabbitmq::consume(&running, deliveries, 8).await;
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
    // Round 2: redeliveries of every key, with another flush in the middle of the run.
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
    assert_eq!(stats.processed + stats.duplicates + stats.already_done, 120);
    fixture.cleanup().await;
}

/// Where the child process stops (and is killed with SIGKILL).
const CHILD_MODE: &str = "IDEM_CHILD_MODE";

/// The child: consumes the queue; the business transaction hangs before commit (`in_tx`) or
/// the handler hangs after commit, before the fast path is completed and the message acked
/// (`after_commit`). It prints a marker, then waits to be killed.
async fn child(mode: String) {
    let fixture = Fixture::from_env().await;
    let truth = Arc::new(fixture.truth());
    let marker_mode = mode.clone();
    let table = fixture.coupons_table.clone();
    let hang = move |job: Job| {
        let truth = Arc::clone(&truth);
        let (mode, table) = (marker_mode.clone(), table.clone());
        async move {
            if mode == "in_tx" {
                // The same SQL claim and insert, then stop before commit.
                let pool = truth.store().pool().clone();
                let mut tx = pool.begin().await.unwrap();
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
    let deliveries = fixture.deliveries(&fixture.amqp).await;
    let _ = rabbitmq::consume(&consumer, deliveries, 1).await;
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
            .env("IDEM_QUEUE", &fixture.queue)
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
        child.kill().await.unwrap(); // SIGKILL: no destructor, no rollback, no release runs.
        let expected_before = if mode == "in_tx" { 0 } else { 1 };
        assert_eq!(
            fixture.rows(Some("T1")).await,
            expected_before,
            "{mode}: committed rows at the kill"
        );

        // Restart: a new consumer, same Redis prefix, same tables. RabbitMQ redelivers T1; the
        // dead owner's Redis lease runs out (2 s) and is taken over; SQL decides.
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
        let connection = Connection::connect(
            &std::env::var("AMQP_URL")
                .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned()),
            ConnectionProperties::default(),
        )
        .await
        .unwrap();
        let deliveries = fixture.deliveries(&connection).await;
        let running = Arc::clone(&consumer);
        let task = tokio::spawn(async move {
            let _ = rabbitmq::consume(&running, deliveries, 4).await;
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
        assert_eq!(fixture.rows(Some("T1")).await, 1, "{mode}: one coupon");
        let _ = connection.close(200, "done".into()).await;
        fixture.cleanup().await;
    }
}
