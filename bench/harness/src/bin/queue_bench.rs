//! Consumer throughput through a real RabbitMQ, with and without the idempotency step, in one
//! run: bare consumer vs memory store (no-op handler), and a bare SQL consumer vs two tiers
//! (Redis fast path + PostgreSQL dedup record in the business transaction), new keys and
//! duplicates.
//!
//! ```text
//! cargo run --release -p idempotency-bench --features queue,redis,postgres --bin queue_bench
//! BENCH_MESSAGES=5000 BENCH_CONCURRENCY=16 ...
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::TryStreamExt;
use idempotency_core::redis::RedisStore;
use idempotency_core::sql::PostgresStore;
use idempotency_core::{Idempotency, MemoryStore, Scope, Store};
use idempotency_queue::two_tier::{SqlTruth, Tx};
use idempotency_queue::{Handler, Header, IdempotentConsumer, Job, KeyExtractor, rabbitmq};
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use sqlx::{PgPool, Postgres};

type Error = Box<dyn std::error::Error + Send + Sync>;

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

struct Bench {
    connection: Connection,
    channel: Channel,
    messages: usize,
    concurrency: usize,
    nonce: u128,
}

impl Bench {
    async fn queue(&self, variant: &str) -> Result<String, Error> {
        let queue = format!("queue-bench-{}-{variant}", self.nonce);
        self.channel
            .queue_declare(
                queue.as_str().into(),
                QueueDeclareOptions::default(),
                FieldTable::default(),
            )
            .await?;
        Ok(queue)
    }

    /// Publishes one message per key `0..messages` (confirmed), untimed.
    async fn publish(&self, queue: &str) -> Result<(), Error> {
        let mut confirms = Vec::with_capacity(self.messages);
        for n in 0..self.messages {
            let mut headers = FieldTable::default();
            headers.insert(
                "business-key".into(),
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

    async fn deliveries(&self, queue: &str) -> Result<lapin::Consumer, Error> {
        let channel = self.connection.create_channel().await?;
        channel
            .basic_qos(
                u16::try_from(self.concurrency * 4)?,
                BasicQosOptions::default(),
            )
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

    async fn delete(&self, queue: &str) -> Result<(), Error> {
        self.channel
            .queue_delete(queue.into(), QueueDeleteOptions::default())
            .await?;
        Ok(())
    }

    /// Consumes `messages` deliveries with a plain ack loop around `work`; messages per second.
    async fn bare<F, Fut>(&self, queue: &str, work: F) -> Result<f64, Error>
    where
        F: Fn(lapin::message::Delivery) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<(), Error>> + Send,
    {
        let done = Arc::new(AtomicU64::new(0));
        let deliveries = self.deliveries(queue).await?;
        let counter = Arc::clone(&done);
        let concurrency = self.concurrency;
        let started = Instant::now();
        let task = tokio::spawn(async move {
            let step = |delivery: lapin::message::Delivery| {
                let counter = Arc::clone(&counter);
                let acker = delivery.acker.clone();
                let fut = work(delivery);
                async move {
                    fut.await
                        .map_err(|e| lapin::Error::from(std::io::Error::other(e.to_string())))?;
                    acker.ack(BasicAckOptions::default()).await?;
                    counter.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                }
            };
            deliveries.try_for_each_concurrent(concurrency, step).await
        });
        self.wait(|| done.load(Ordering::Relaxed), started).await;
        let elapsed = started.elapsed();
        task.abort();
        Ok(self.messages as f64 / elapsed.as_secs_f64())
    }

    /// Consumes `messages` deliveries through an idempotent consumer; messages per second.
    async fn guarded<S, K, H>(
        &self,
        queue: &str,
        consumer: IdempotentConsumer<S, K, H>,
    ) -> Result<f64, Error>
    where
        S: Store,
        K: KeyExtractor,
        H: Handler,
    {
        let consumer = Arc::new(consumer);
        let deliveries = self.deliveries(queue).await?;
        let running = Arc::clone(&consumer);
        let concurrency = self.concurrency;
        let started = Instant::now();
        let task = tokio::spawn(async move {
            // Every message here has its key and one payload: nothing is rejected.
            let dead_letters = rabbitmq::DeadLetters::drop_and_log();
            rabbitmq::consume(&running, deliveries, &dead_letters, concurrency).await
        });
        self.wait(|| consumer.stats().snapshot().acked(), started)
            .await;
        let elapsed = started.elapsed();
        task.abort();
        let stats = consumer.stats().snapshot();
        if stats.failed + stats.store_unavailable + stats.in_flight > 0 {
            eprintln!("  (requeues during the run: {stats:?})");
        }
        Ok(self.messages as f64 / elapsed.as_secs_f64())
    }

    async fn wait(&self, acked: impl Fn() -> u64, started: Instant) {
        while acked() < self.messages as u64 {
            assert!(
                started.elapsed() < Duration::from_secs(600),
                "bench stalled"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

async fn sql_tables(pool: &PgPool, nonce: u128) -> Result<(String, String), Error> {
    let coupons = format!("bench_coupons_{nonce}");
    let dedup = format!("bench_dedup_{nonce}");
    sqlx::query(&format!(
        "CREATE TABLE {coupons} (id BIGSERIAL PRIMARY KEY, business_key TEXT NOT NULL)"
    ))
    .execute(pool)
    .await?;
    PostgresStore::new(pool.clone())
        .with_table_name(&dedup)?
        .migrate()
        .await?;
    Ok((coupons, dedup))
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let messages: usize = env_or("BENCH_MESSAGES", "5000").parse()?;
    let concurrency: usize = env_or("BENCH_CONCURRENCY", "16").parse()?;
    let connection = Connection::connect(
        &env_or("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f"),
        ConnectionProperties::default(),
    )
    .await?;
    let channel = connection.create_channel().await?;
    channel.confirm_select(Default::default()).await?;
    let nonce = SystemTime::now().duration_since(UNIX_EPOCH)?.as_micros();
    let bench = Bench {
        connection,
        channel,
        messages,
        concurrency,
        nonce,
    };
    let pool = PgPool::connect(&env_or(
        "DATABASE_URL",
        "postgres://postgres@127.0.0.1:5432/test",
    ))
    .await?;
    let redis_url = env_or("REDIS_URL", "redis://127.0.0.1:6379");
    let (coupons, dedup) = sql_tables(&pool, nonce).await?;
    let insert = format!("INSERT INTO {coupons} (business_key) VALUES ($1)");

    println!(
        "{messages} messages, {concurrency} concurrent, RabbitMQ prefetch {}",
        concurrency * 4
    );
    println!("| variant | handler | msg/s |");
    println!("|---|---|---|");
    let mut rows = Vec::new();

    // 1. Bare consumer, no-op handler.
    let queue = bench.queue("bare").await?;
    bench.publish(&queue).await?;
    let rate = bench.bare(&queue, |_| async { Ok(()) }).await?;
    bench.delete(&queue).await?;
    rows.push(("bare (ack only)", "no-op", rate));

    // 2. Memory store, no-op handler.
    let queue = bench.queue("memory").await?;
    bench.publish(&queue).await?;
    let consumer = IdempotentConsumer::new(
        Idempotency::new(MemoryStore::new()),
        Scope::new("bench"),
        Header::new("business-key"),
        |_job: Job| async { Ok::<_, String>(()) },
    );
    let rate = bench.guarded(&queue, consumer).await?;
    bench.delete(&queue).await?;
    rows.push(("idempotent, memory store", "no-op", rate));

    // 3. Bare consumer, business insert in a PostgreSQL transaction.
    let queue = bench.queue("bare-sql").await?;
    bench.publish(&queue).await?;
    let (sql_pool, sql_insert) = (pool.clone(), insert.clone());
    let rate = bench
        .bare(&queue, move |delivery| {
            let (pool, insert) = (sql_pool.clone(), sql_insert.clone());
            async move {
                let key = delivery.properties.headers().as_ref().and_then(|h| {
                    h.inner()
                        .get("business-key")
                        .and_then(|v| v.as_long_string())
                        .map(|s| s.to_string())
                });
                let mut tx = pool.begin().await?;
                sqlx::query(&insert)
                    .bind(key.unwrap_or_default())
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(())
            }
        })
        .await?;
    bench.delete(&queue).await?;
    rows.push(("bare (ack only)", "INSERT in a PG tx", rate));

    // 4. Two tiers: Redis fast path + PG dedup record in the business transaction.
    let scope = Scope::new(format!("bench-{nonce}"));
    let two_tier = |redis: RedisStore| {
        let insert = insert.clone();
        let truth = PostgresStore::new(pool.clone())
            .with_table_name(&dedup)
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(
            IdempotentConsumer::new(
                Idempotency::new(redis),
                scope.clone(),
                Header::new("business-key"),
                SqlTruth::new(truth, scope.clone(), move |tx: Tx<Postgres>, job: Job| {
                    let insert = insert.clone();
                    async move {
                        sqlx::query(&insert)
                            .bind(job.key.as_str())
                            .execute(&mut *tx.conn().await)
                            .await
                            .map(drop)
                    }
                }),
            )
            .with_guarded_handler(true),
        )
    };
    let prefix = format!("queue-bench-{nonce}");
    let redis = || async {
        RedisStore::connect(&redis_url)
            .await
            .map(|s| s.with_key_prefix(prefix.clone()))
    };
    let queue = bench.queue("two-tier").await?;
    bench.publish(&queue).await?;
    let rate = bench.guarded(&queue, two_tier(redis().await?)?).await?;
    rows.push((
        "idempotent, Redis + PG two tiers, new keys",
        "INSERT in a PG tx",
        rate,
    ));

    // 5. The same keys again: every delivery a duplicate answered by Redis.
    bench.publish(&queue).await?;
    let rate = bench.guarded(&queue, two_tier(redis().await?)?).await?;
    rows.push((
        "idempotent, two tiers, duplicates (Redis hit)",
        "not run",
        rate,
    ));

    // 6. The same keys again after losing Redis (new prefix = empty fast path): SQL answers.
    bench.publish(&queue).await?;
    let empty = RedisStore::connect(&redis_url)
        .await?
        .with_key_prefix(format!("{prefix}-empty"));
    let rate = bench.guarded(&queue, two_tier(empty)?).await?;
    bench.delete(&queue).await?;
    rows.push((
        "idempotent, two tiers, duplicates after a Redis loss (SQL hit)",
        "not run",
        rate,
    ));

    for (variant, handler, rate) in rows {
        println!("| {variant} | {handler} | {rate:.0} |");
    }
    let count: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {coupons}"))
        .fetch_one(&pool)
        .await?;
    println!(
        "business rows: {count} (bare SQL run {messages} + two-tier run {messages}; duplicates added none)"
    );
    for table in [&coupons, &dedup] {
        sqlx::query(&format!("DROP TABLE IF EXISTS {table}"))
            .execute(&pool)
            .await?;
    }
    Ok(())
}
