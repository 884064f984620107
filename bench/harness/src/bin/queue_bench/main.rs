//! Consumer throughput through a real RabbitMQ and a real NATS JetStream, with and without the
//! idempotency step, every variant on both brokers in one run: a bare consumer against the
//! memory store and the Redis store (no-op handler), and a bare SQL consumer against two tiers
//! (Redis fast path + PostgreSQL dedup record in the business transaction), new keys and
//! duplicates.
//!
//! ```text
//! cargo build --release -p idempotency-bench --features queue,redis,postgres --bin queue_bench
//! BENCH_MESSAGES=5000 BENCH_CONCURRENCY=16 target/release/queue_bench
//! ```

mod nats;
mod rabbitmq;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use idempotency_core::{Idempotency, MemoryStore, Scope, Store};
use idempotency_queue::two_tier::{SqlTruth, Tx};
use idempotency_queue::{Handler, Header, IdempotentConsumer, Job, KeyExtractor};
use idempotency_redis::RedisStore;
use idempotency_sql::PostgresStore;
use sqlx::{PgPool, Postgres};

pub(crate) type Error = Box<dyn std::error::Error + Send + Sync>;

/// How long the bench's Redis records live: long enough for a run, not the default day (a run
/// writes 25 000 of them).
const BENCH_TTL: Duration = Duration::from_secs(600);

/// The header every benchmark message carries its business key in.
pub(crate) const KEY_HEADER: &str = "business-key";

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

/// A broker the bench runs the same variants on: messages `T0` … `T<messages - 1>`, the key in
/// [`KEY_HEADER`], consumed `concurrency` at a time with manual acks.
pub(crate) trait Broker {
    /// Its name in the table.
    fn name(&self) -> &'static str;
    /// A fresh, empty queue (RabbitMQ) or stream subject (NATS) for `variant`.
    async fn declare(&self, variant: &str) -> Result<String, Error>;
    /// Publishes one message per key, every publish confirmed; untimed.
    async fn publish(&self, queue: &str) -> Result<(), Error>;
    /// Consumes every message with a plain loop: `work(key)`, then the ack. Messages per second.
    async fn bare<F, Fut>(&self, queue: &str, work: F) -> Result<f64, Error>
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), Error>> + Send;
    /// Consumes every message through `consumer`. Messages per second.
    async fn guarded<S, K, H>(
        &self,
        queue: &str,
        consumer: IdempotentConsumer<S, K, H>,
    ) -> Result<f64, Error>
    where
        S: Store,
        K: KeyExtractor,
        H: Handler;
    /// Deletes the queue or stream.
    async fn delete(&self, queue: &str) -> Result<(), Error>;
}

/// Runs `consume` (spawned) until `acked()` reaches `messages`; messages per second.
pub(crate) async fn timed<Fut>(messages: usize, consume: Fut, acked: impl Fn() -> u64) -> f64
where
    Fut: Future + Send + 'static,
    Fut::Output: Send + 'static,
{
    let started = Instant::now();
    let task = tokio::spawn(consume);
    while acked() < messages as u64 {
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "bench stalled"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let rate = messages as f64 / started.elapsed().as_secs_f64();
    // The last verdicts are counted before their acks are sent: let those go out (untimed),
    // else they are redelivered into the next run that reads the same queue.
    tokio::time::sleep(Duration::from_millis(200)).await;
    task.abort();
    rate
}

/// [`timed`] for an idempotent consumer: `consume(consumer)` until it acked `messages`; prints
/// the run's requeues, if any (they cost throughput; none are expected).
pub(crate) async fn guarded_rate<S, K, H, F, Fut>(
    messages: usize,
    consumer: IdempotentConsumer<S, K, H>,
    consume: F,
) -> f64
where
    S: Store,
    K: KeyExtractor,
    H: Handler,
    F: FnOnce(Arc<IdempotentConsumer<S, K, H>>) -> Fut,
    Fut: Future + Send + 'static,
    Fut::Output: Send + 'static,
{
    let consumer = Arc::new(consumer);
    let acked = || consumer.stats().snapshot().acked();
    let rate = timed(messages, consume(Arc::clone(&consumer)), acked).await;
    let stats = consumer.stats().snapshot();
    if stats.failed + stats.store_unavailable + stats.in_flight > 0 {
        eprintln!("  (requeues during the run: {stats:?})");
    }
    rate
}

/// The SQL side: the business table, the dedup table, the Redis prefix, all under this run's
/// names.
struct Sql {
    pool: PgPool,
    coupons: String,
    dedup: String,
    redis_url: String,
}

impl Sql {
    async fn new(pool: PgPool, redis_url: String, nonce: u128) -> Result<Self, Error> {
        let coupons = format!("bench_coupons_{nonce}");
        let dedup = format!("bench_dedup_{nonce}");
        sqlx::query(&format!(
            "CREATE TABLE {coupons} (id BIGSERIAL PRIMARY KEY, business_key TEXT NOT NULL)"
        ))
        .execute(&pool)
        .await?;
        PostgresStore::new(pool.clone())
            .with_table_name(&dedup)?
            .migrate()
            .await?;
        Ok(Self {
            pool,
            coupons,
            dedup,
            redis_url,
        })
    }

    fn insert(&self) -> String {
        format!("INSERT INTO {} (business_key) VALUES ($1)", self.coupons)
    }

    async fn redis(&self, prefix: &str) -> Result<RedisStore, Error> {
        Ok(RedisStore::connect(&self.redis_url)
            .await?
            .with_key_prefix(prefix))
    }

    /// The two-tier consumer: `fast` in front, the dedup record claimed in the insert's
    /// transaction.
    fn two_tier(
        &self,
        fast: RedisStore,
        scope: &Scope,
    ) -> Result<IdempotentConsumer<RedisStore, Header, impl Handler + use<>>, Error> {
        let insert = self.insert();
        let truth = PostgresStore::new(self.pool.clone()).with_table_name(&self.dedup)?;
        let business = move |tx: Tx<Postgres>, job: Job| {
            let insert = insert.clone();
            async move {
                sqlx::query(&insert)
                    .bind(job.key.as_str())
                    .execute(&mut *tx.conn().await)
                    .await
                    .map(drop)
            }
        };
        Ok(IdempotentConsumer::new(
            Idempotency::new(fast).with_ttl(BENCH_TTL),
            scope.clone(),
            Header::new(KEY_HEADER),
            SqlTruth::new(truth, scope.clone(), business),
        ))
    }

    async fn rows(&self) -> Result<i64, Error> {
        let query = format!("SELECT COUNT(*) FROM {}", self.coupons);
        Ok(sqlx::query_scalar(&query).fetch_one(&self.pool).await?)
    }

    async fn drop_tables(&self) -> Result<(), Error> {
        for table in [&self.coupons, &self.dedup] {
            sqlx::query(&format!("DROP TABLE IF EXISTS {table}"))
                .execute(&self.pool)
                .await?;
        }
        Ok(())
    }
}

/// One row of the table.
type Row = (&'static str, &'static str, f64);

/// Every variant on `broker`.
async fn variants<B: Broker>(broker: &B, sql: &Sql, nonce: u128) -> Result<Vec<Row>, Error> {
    let mut rows = Vec::new();
    let no_op = |_job: Job| async { Ok::<_, String>(()) };
    let scope = |variant: &str| Scope::new(format!("bench-{nonce}-{}-{variant}", broker.name()));

    let queue = broker.declare("bare").await?;
    broker.publish(&queue).await?;
    let rate = broker.bare(&queue, |_| async { Ok(()) }).await?;
    broker.delete(&queue).await?;
    rows.push(("bare (ack only)", "no-op", rate));

    let queue = broker.declare("memory").await?;
    broker.publish(&queue).await?;
    let engine = Idempotency::new(MemoryStore::new());
    let consumer = IdempotentConsumer::new(engine, scope("memory"), Header::new(KEY_HEADER), no_op);
    let rate = broker.guarded(&queue, consumer).await?;
    broker.delete(&queue).await?;
    rows.push(("idempotent, memory store", "no-op", rate));

    let queue = broker.declare("redis").await?;
    broker.publish(&queue).await?;
    let prefix = format!("queue-bench-{nonce}-{}-redis", broker.name());
    let engine = Idempotency::new(sql.redis(&prefix).await?).with_ttl(BENCH_TTL);
    let consumer = IdempotentConsumer::new(engine, scope("redis"), Header::new(KEY_HEADER), no_op);
    let rate = broker.guarded(&queue, consumer).await?;
    broker.delete(&queue).await?;
    rows.push(("idempotent, Redis store", "no-op", rate));

    let queue = broker.declare("bare-sql").await?;
    broker.publish(&queue).await?;
    let (pool, insert) = (sql.pool.clone(), sql.insert());
    let rate = broker
        .bare(&queue, move |key| {
            let (pool, insert) = (pool.clone(), insert.clone());
            async move {
                let mut tx = pool.begin().await?;
                sqlx::query(&insert).bind(key).execute(&mut *tx).await?;
                tx.commit().await?;
                Ok(())
            }
        })
        .await?;
    broker.delete(&queue).await?;
    rows.push(("bare (ack only)", "INSERT in a PG tx", rate));

    // Three runs over the same keys, each on a queue of its own (a run's consumer may leave
    // prefetched messages unacked when it stops; on a shared queue they would stall the next).
    let two_tier = scope("two-tier");
    let prefix = format!("queue-bench-{nonce}-{}-two-tier", broker.name());
    let runs = [
        (
            "two-tier",
            prefix.clone(),
            (
                "idempotent, Redis + PG two tiers, new keys",
                "INSERT in a PG tx",
            ),
        ),
        // The same keys again: every delivery a duplicate answered by Redis.
        (
            "two-tier-again",
            prefix.clone(),
            ("idempotent, two tiers, duplicates (Redis hit)", "not run"),
        ),
        // The same keys after losing Redis (a new prefix: an empty fast path): SQL answers.
        (
            "two-tier-miss",
            format!("{prefix}-empty"),
            (
                "idempotent, two tiers, duplicates after a Redis loss (SQL hit)",
                "not run",
            ),
        ),
    ];
    for (variant, fast_prefix, (label, handler)) in runs {
        let queue = broker.declare(variant).await?;
        broker.publish(&queue).await?;
        let consumer = sql.two_tier(sql.redis(&fast_prefix).await?, &two_tier)?;
        let rate = broker.guarded(&queue, consumer).await?;
        broker.delete(&queue).await?;
        rows.push((label, handler, rate));
    }
    Ok(rows)
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let messages: usize = env_or("BENCH_MESSAGES", "5000").parse()?;
    let concurrency: usize = env_or("BENCH_CONCURRENCY", "16").parse()?;
    let nonce = SystemTime::now().duration_since(UNIX_EPOCH)?.as_micros();
    let pool = PgPool::connect(&env_or(
        "DATABASE_URL",
        "postgres://postgres@127.0.0.1:5432/test",
    ))
    .await?;
    let sql = Sql::new(pool, env_or("REDIS_URL", "redis://127.0.0.1:6379"), nonce).await?;
    let rabbitmq = rabbitmq::RabbitMq::connect(
        &env_or("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f"),
        messages,
        concurrency,
        nonce,
    )
    .await?;
    let nats = nats::Nats::connect(
        &env_or("NATS_URL", "nats://127.0.0.1:4222"),
        messages,
        concurrency,
        nonce,
    )
    .await?;

    println!(
        "{messages} messages, {concurrency} concurrent (RabbitMQ prefetch and NATS max_ack_pending {})",
        concurrency * 4
    );
    let on_rabbitmq = variants(&rabbitmq, &sql, nonce).await?;
    let on_nats = variants(&nats, &sql, nonce).await?;
    println!("| variant | handler | RabbitMQ msg/s | NATS msg/s |");
    println!("|---|---|---|---|");
    for ((variant, handler, amqp), (_, _, js)) in on_rabbitmq.into_iter().zip(on_nats) {
        println!("| {variant} | {handler} | {amqp:.0} | {js:.0} |");
    }
    println!(
        "business rows: {} (per broker: bare SQL {messages} + two tiers {messages}; duplicates added none)",
        sql.rows().await?
    );
    sql.drop_tables().await
}
