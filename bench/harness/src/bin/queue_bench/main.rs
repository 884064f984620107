//! Consumer throughput through a real RabbitMQ and a real NATS JetStream, with and without the
//! idempotency step, every variant on both brokers in one run: a bare consumer against the
//! memory store and the Redis store (no-op handler), and, with a business `INSERT` in a
//! PostgreSQL transaction, a bare consumer, the post-mortem's dedup written by hand (a dedup
//! row inserted in the business transaction, a unique conflict a duplicate) and two tiers
//! (Redis fast path + PostgreSQL dedup record in the business transaction), new keys and
//! duplicates. Each row also gets its CPU time per message (the bench, its PostgreSQL
//! backends, Redis, the broker); a last pass counts what each SQL variant sends per message.
//!
//! ```text
//! cargo build --release -p idempotency-bench --features queue,redis,postgres --bin queue_bench
//! BENCH_MESSAGES=5000 BENCH_CONCURRENCY=16 BENCH_ROUNDS=3 target/release/queue_bench
//! ```
//!
//! `BENCH_ROUNDS` (1): rounds of every variant, the table gives the medians. `BENCH_ONLY`: a
//! comma-separated list of variants to run (`bare`, `memory`, `redis`, `bare-sql`,
//! `hand-written`, `hand-written-output`, `post-mortem`, `sql-only`, `two-tier`, `two-tier-again`,
//! `two-tier-later`, `two-tier-miss`). `BENCH_COUNT` (1000): messages per variant of the
//! counting pass (0: none).
//!
//! `post-mortem` is the post-mortem's consumer itself, by hand: a Redis `SET NX` in front, the
//! dedup table asked when Redis has seen the key, the dedup row written after the business
//! `INSERT` (issue 39's floor compares two tiers with it, and with `hand-written`). Two more
//! variants place the difference between the hand-written consumer and two tiers:
//! `hand-written-output` also stores an output with its dedup row (an `UPDATE` after the
//! business `INSERT`, as the record of truth does), `sql-only` is two tiers without the Redis
//! tier (`TwoTier::sql_only`: the record of truth alone).

mod cpu;
mod leftovers;
mod nats;
mod rabbitmq;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cpu::Cpu;
use idempotency_bench::wire::{CountingProxy, Protocol, plaintext_postgres, through, upstream_of};
use idempotency_core::{Idempotency, MemoryStore, Scope, Store};
use idempotency_queue::two_tier::{SqlTruth, TwoTier, Tx};
use idempotency_queue::{Handler, Header, IdempotentConsumer, Job, KeyExtractor};
use idempotency_redis::RedisStore;
use idempotency_sql::PostgresStore;
use idempotency_test::redis_commands::{Log, counting_proxy};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, Postgres};

pub(crate) type Error = Box<dyn std::error::Error + Send + Sync>;

/// How long the bench's Redis records live: long enough for a run, not the default day (a run
/// writes 25 000 of them).
pub(crate) const BENCH_TTL: Duration = Duration::from_secs(600);

/// The header every benchmark message carries its business key in.
pub(crate) const KEY_HEADER: &str = "business-key";

/// SQLSTATE `unique_violation`.
const UNIQUE_VIOLATION: &str = "23505";

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

/// One timed consumption: its rate and where its CPU went.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Run {
    pub(crate) rate: f64,
    pub(crate) cpu: Cpu,
}

/// A broker the bench runs the same variants on: messages `T0` … `T<messages - 1>`, the key in
/// [`KEY_HEADER`], consumed `concurrency` at a time with manual acks.
pub(crate) trait Broker {
    /// Its name in the table.
    fn name(&self) -> &'static str;
    /// How many messages a queue gets.
    fn messages(&self) -> usize;
    /// A fresh, empty queue (RabbitMQ) or stream subject (NATS) for `variant`.
    async fn declare(&self, variant: &str) -> Result<String, Error>;
    /// Publishes one message per key, every publish confirmed; untimed.
    async fn publish(&self, queue: &str) -> Result<(), Error>;
    /// Consumes every message with a plain loop: `work(key)`, then the ack.
    async fn bare<F, Fut>(&self, queue: &str, work: F) -> Result<Run, Error>
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), Error>> + Send;
    /// Consumes every message through `consumer`.
    async fn guarded<S, K, H>(
        &self,
        queue: &str,
        consumer: IdempotentConsumer<S, K, H>,
    ) -> Result<Run, Error>
    where
        S: Store,
        K: KeyExtractor,
        H: Handler;
    /// Deletes the queue or stream.
    async fn delete(&self, queue: &str) -> Result<(), Error>;
}

/// Runs `consume` (spawned) on `broker` until `acked()` reaches `messages`: the rate and the
/// CPU spent meanwhile.
pub(crate) async fn timed<Fut>(
    broker: &'static str,
    messages: usize,
    consume: Fut,
    acked: impl Fn() -> u64,
) -> Result<Run, Error>
where
    Fut: Future + Send + 'static,
    Fut::Output: Send + 'static,
{
    let meter = cpu::meter()?;
    let mark = meter.mark(broker).await?;
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
    let cpu = meter.since(&mark).await?;
    // The last verdicts are counted before their acks are sent: let those go out (untimed),
    // else they are redelivered into the next run that reads the same queue.
    tokio::time::sleep(Duration::from_millis(200)).await;
    task.abort();
    Ok(Run { rate, cpu })
}

/// [`timed`] for an idempotent consumer: `consume(consumer)` until it acked `messages`; prints
/// the run's requeues, if any (they cost throughput; none are expected).
pub(crate) async fn guarded_run<S, K, H, F, Fut>(
    broker: &'static str,
    messages: usize,
    consumer: IdempotentConsumer<S, K, H>,
    consume: F,
) -> Result<Run, Error>
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
    let run = timed(broker, messages, consume(Arc::clone(&consumer)), acked).await?;
    let stats = consumer.stats().snapshot();
    if stats.failed + stats.store_unavailable + stats.in_flight > 0 {
        eprintln!("  (requeues during the run: {stats:?})");
    }
    Ok(run)
}

/// The SQL side: the business table, the dedup tables, the Redis prefix, all under this
/// round's names.
struct Sql {
    pool: PgPool,
    coupons: String,
    /// The two tiers' record of truth.
    dedup: String,
    /// The hand-written consumer's dedup table.
    by_hand: String,
    /// The dedup table of the hand-written consumer that stores an output.
    by_hand_output: String,
    /// The dedup table of the post-mortem's consumer by hand.
    post_mortem: String,
    redis_url: String,
    nonce: u128,
}

impl Sql {
    async fn new(pool: PgPool, redis_url: String, nonce: u128) -> Result<Self, Error> {
        let coupons = format!("bench_coupons_{nonce}");
        let dedup = format!("bench_dedup_{nonce}");
        let by_hand = format!("bench_by_hand_{nonce}");
        let by_hand_output = format!("bench_by_hand_output_{nonce}");
        let post_mortem = format!("bench_post_mortem_{nonce}");
        sqlx::query(&format!(
            "CREATE TABLE {coupons} (id BIGSERIAL PRIMARY KEY, business_key TEXT NOT NULL)"
        ))
        .execute(&pool)
        .await?;
        sqlx::query(&format!(
            "CREATE TABLE {by_hand} (business_key TEXT PRIMARY KEY)"
        ))
        .execute(&pool)
        .await?;
        sqlx::query(&format!(
            "CREATE TABLE {by_hand_output} (business_key TEXT PRIMARY KEY, output BYTEA)"
        ))
        .execute(&pool)
        .await?;
        sqlx::query(&format!(
            "CREATE TABLE {post_mortem} (business_key TEXT PRIMARY KEY)"
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
            by_hand,
            by_hand_output,
            post_mortem,
            redis_url,
            nonce,
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

    /// The bare SQL consumer's work: the business `INSERT` in a transaction.
    fn bare(
        &self,
    ) -> impl Fn(String) -> futures_util::future::BoxFuture<'static, Result<(), Error>>
    + Send
    + Sync
    + 'static {
        let (pool, insert) = (self.pool.clone(), self.insert());
        move |key| {
            let (pool, insert) = (pool.clone(), insert.clone());
            Box::pin(async move {
                let mut tx = pool.begin().await?;
                sqlx::query(&insert).bind(key).execute(&mut *tx).await?;
                tx.commit().await?;
                Ok(())
            })
        }
    }

    /// The post-mortem's consumer written by hand: in the business transaction, the key into a
    /// dedup table with a unique key, then the business `INSERT`; a unique conflict on the key
    /// is a duplicate (rolled back, acked). With `output`, the dedup row also gets the output
    /// (`null`, as the record of truth stores `()`) by an `UPDATE` after the business `INSERT`.
    fn hand_written(
        &self,
        output: bool,
    ) -> impl Fn(String) -> futures_util::future::BoxFuture<'static, Result<(), Error>>
    + Send
    + Sync
    + 'static {
        let pool = self.pool.clone();
        let table = if output {
            &self.by_hand_output
        } else {
            &self.by_hand
        };
        let dedup = format!("INSERT INTO {table} (business_key) VALUES ($1)");
        let store =
            output.then(|| format!("UPDATE {table} SET output = $1 WHERE business_key = $2"));
        let insert = self.insert();
        move |key| {
            let (pool, dedup, insert) = (pool.clone(), dedup.clone(), insert.clone());
            let store = store.clone();
            Box::pin(async move {
                let mut tx = pool.begin().await?;
                match sqlx::query(&dedup).bind(&key).execute(&mut *tx).await {
                    Ok(_) => {}
                    Err(sqlx::Error::Database(error))
                        if error.code().as_deref() == Some(UNIQUE_VIOLATION) =>
                    {
                        tx.rollback().await?;
                        return Ok(());
                    }
                    Err(error) => return Err(error.into()),
                }
                sqlx::query(&insert).bind(&key).execute(&mut *tx).await?;
                if let Some(store) = &store {
                    sqlx::query(store)
                        .bind(&b"null"[..])
                        .bind(&key)
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                Ok(())
            })
        }
    }

    /// The post-mortem's consumer by hand, as it is written there: `SET NX EX` of the key in
    /// Redis (the pre-check, one round trip); a key Redis has seen is looked up in the dedup
    /// table, the truth (Redis may have lost the work's commit or the key), and acked if there;
    /// then, in one transaction, the business `INSERT` and the dedup row after it, a unique
    /// conflict on it a concurrent duplicate (rolled back, acked).
    async fn post_mortem(
        &self,
        prefix: &str,
    ) -> Result<
        impl Fn(String) -> futures_util::future::BoxFuture<'static, Result<(), Error>>
        + Send
        + Sync
        + 'static,
        Error,
    > {
        let redis = redis::Client::open(self.redis_url.as_str())?
            .get_connection_manager()
            .await?;
        let pool = self.pool.clone();
        let table = &self.post_mortem;
        let seen = format!("SELECT 1 FROM {table} WHERE business_key = $1");
        let dedup = format!("INSERT INTO {table} (business_key) VALUES ($1)");
        let insert = self.insert();
        let prefix = format!("{prefix}:idem:mq:");
        let ttl = BENCH_TTL.as_secs();
        Ok(move |key: String| {
            let (pool, mut redis) = (pool.clone(), redis.clone());
            let (seen, dedup, insert) = (seen.clone(), dedup.clone(), insert.clone());
            let marker = format!("{prefix}{key}");
            Box::pin(async move {
                let first: Option<String> = redis::cmd("SET")
                    .arg(&marker)
                    .arg(1)
                    .arg("NX")
                    .arg("EX")
                    .arg(ttl)
                    .query_async(&mut redis)
                    .await?;
                if first.is_none() {
                    let done: Option<i32> = sqlx::query_scalar(&seen)
                        .bind(&key)
                        .fetch_optional(&pool)
                        .await?;
                    if done.is_some() {
                        return Ok(());
                    }
                }
                let mut tx = pool.begin().await?;
                sqlx::query(&insert).bind(&key).execute(&mut *tx).await?;
                match sqlx::query(&dedup).bind(&key).execute(&mut *tx).await {
                    Ok(_) => tx.commit().await?,
                    Err(sqlx::Error::Database(error))
                        if error.code().as_deref() == Some(UNIQUE_VIOLATION) =>
                    {
                        tx.rollback().await?;
                    }
                    Err(error) => return Err(error.into()),
                }
                Ok(())
            }) as futures_util::future::BoxFuture<'static, Result<(), Error>>
        })
    }

    /// The record of truth alone, without a fast tier (`TwoTier::sql_only`).
    fn sql_only(
        &self,
        scope: &Scope,
    ) -> Result<IdempotentConsumer<PostgresStore, Header, impl Handler + use<>>, Error> {
        Ok(TwoTier::new(self.truth(scope)?).sql_only(Header::new(KEY_HEADER))?)
    }

    /// The record of truth: the dedup record claimed in the business `INSERT`'s transaction.
    fn truth(
        &self,
        scope: &Scope,
    ) -> Result<
        SqlTruth<
            PostgresStore,
            Job,
            impl idempotency_queue::two_tier::Business<Postgres, Job> + use<>,
        >,
        Error,
    > {
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
        Ok(SqlTruth::new(truth, scope.clone(), business))
    }

    /// The two-tier consumer: `fast` in front, the dedup record claimed in the insert's
    /// transaction.
    fn two_tier(
        &self,
        fast: RedisStore,
        scope: &Scope,
    ) -> Result<IdempotentConsumer<RedisStore, Header, impl Handler + use<>>, Error> {
        Ok(IdempotentConsumer::new(
            Idempotency::new(fast).with_ttl(BENCH_TTL),
            scope.clone(),
            Header::new(KEY_HEADER),
            self.truth(scope)?,
        ))
    }

    async fn rows(&self) -> Result<i64, Error> {
        let query = format!("SELECT COUNT(*) FROM {}", self.coupons);
        Ok(sqlx::query_scalar(&query).fetch_one(&self.pool).await?)
    }

    async fn drop_tables(&self) -> Result<(), Error> {
        for table in [
            &self.coupons,
            &self.dedup,
            &self.by_hand,
            &self.by_hand_output,
            &self.post_mortem,
        ] {
            sqlx::query(&format!("DROP TABLE IF EXISTS {table}"))
                .execute(&self.pool)
                .await?;
        }
        // The Redis keys of this round's variants (pending claims outlive a run by their
        // lease's grace): unlinked, or a shared Redis fills with them.
        let redis = redis::Client::open(self.redis_url.as_str())?;
        let mut connection = redis.get_multiplexed_async_connection().await?;
        let keys: Vec<String> = {
            let pattern = format!("queue-bench-{}-*", self.nonce);
            let mut scan =
                redis::AsyncCommands::scan_match::<_, String>(&mut connection, pattern).await?;
            let mut keys = Vec::new();
            while let Some(key) = futures_util::StreamExt::next(&mut scan).await {
                keys.push(key?);
            }
            keys
        };
        for batch in keys.chunks(1000) {
            let _: i64 = redis::cmd("UNLINK")
                .arg(batch)
                .query_async(&mut connection)
                .await?;
        }
        // The record's fencing sequence is not the table's, nor is its row in the versions
        // table: they stay unless removed.
        sqlx::query(&format!(
            "DROP SEQUENCE IF EXISTS \"{}_token_seq\"",
            self.dedup
        ))
        .execute(&self.pool)
        .await?;
        sqlx::query("DELETE FROM idempotency_schema WHERE table_name = $1")
            .bind(&self.dedup)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

/// The variants, in the table's order.
const VARIANTS: [(&str, &str, &str); 12] = [
    ("bare", "bare (ack only)", "no-op"),
    ("memory", "idempotent, memory store", "no-op"),
    ("redis", "idempotent, Redis store", "no-op"),
    ("bare-sql", "bare (ack only)", "INSERT in a PG tx"),
    (
        "hand-written",
        "hand-written dedup (dedup row in the tx, unique conflict = duplicate)",
        "INSERT in a PG tx",
    ),
    (
        "hand-written-output",
        "hand-written dedup, output stored (an UPDATE of the dedup row)",
        "INSERT in a PG tx",
    ),
    (
        "post-mortem",
        "the post-mortem's consumer by hand (Redis SET NX, the dedup row after the business INSERT)",
        "INSERT in a PG tx",
    ),
    (
        "sql-only",
        "idempotent, PG record of truth only (no Redis), new keys",
        "INSERT in a PG tx",
    ),
    (
        "two-tier",
        "idempotent, Redis + PG two tiers, new keys",
        "INSERT in a PG tx",
    ),
    (
        "two-tier-again",
        "idempotent, two tiers, first copies (Redis pending: the truth answers, then the settle)",
        "not run",
    ),
    (
        "two-tier-later",
        "idempotent, two tiers, later copies (Redis hit)",
        "not run",
    ),
    (
        "two-tier-miss",
        "idempotent, two tiers, duplicates after a Redis loss (SQL hit)",
        "not run",
    ),
];

/// The variants that commit one business row per message (new keys).
const COMMITTING: [&str; 6] = [
    "bare-sql",
    "hand-written",
    "hand-written-output",
    "post-mortem",
    "sql-only",
    "two-tier",
];

/// Runs `variant` on `broker` against `sql` (the two-tier duplicates after `two-tier` on the
/// same `sql`).
async fn run_variant<B: Broker>(broker: &B, sql: &Sql, variant: &str) -> Result<Run, Error> {
    let no_op = |_job: Job| async { Ok::<_, String>(()) };
    let nonce = sql.nonce;
    let scope = |variant: &str| Scope::new(format!("bench-{nonce}-{}-{variant}", broker.name()));
    let prefix = |variant: &str| format!("queue-bench-{nonce}-{}-{variant}", broker.name());
    // Each on a queue of its own (a run's consumer may leave prefetched messages unacked when
    // it stops; on a shared queue they would stall the next).
    let queue = broker.declare(variant).await?;
    broker.publish(&queue).await?;
    let run = match variant {
        "bare" => broker.bare(&queue, |_| async { Ok(()) }).await?,
        "memory" => {
            let engine = Idempotency::new(MemoryStore::new());
            let consumer =
                IdempotentConsumer::new(engine, scope(variant), Header::new(KEY_HEADER), no_op);
            broker.guarded(&queue, consumer).await?
        }
        "redis" => {
            let engine = Idempotency::new(sql.redis(&prefix(variant)).await?).with_ttl(BENCH_TTL);
            let consumer =
                IdempotentConsumer::new(engine, scope(variant), Header::new(KEY_HEADER), no_op);
            broker.guarded(&queue, consumer).await?
        }
        "bare-sql" => broker.bare(&queue, sql.bare()).await?,
        "hand-written" => broker.bare(&queue, sql.hand_written(false)).await?,
        "hand-written-output" => broker.bare(&queue, sql.hand_written(true)).await?,
        "post-mortem" => {
            broker
                .bare(&queue, sql.post_mortem(&prefix(variant)).await?)
                .await?
        }
        "sql-only" => {
            broker
                .guarded(&queue, sql.sql_only(&scope(variant))?)
                .await?
        }
        // The same keys four times, one scope: new keys; first copies (each meets its pending
        // claim: the truth answers, the claim is settled); later copies, answered by Redis;
        // the same keys after losing Redis (a new prefix: an empty fast path), SQL answers.
        "two-tier" | "two-tier-again" | "two-tier-later" | "two-tier-miss" => {
            let fast = match variant {
                "two-tier-miss" => format!("{}-empty", prefix("two-tier")),
                _ => prefix("two-tier"),
            };
            let consumer = sql.two_tier(sql.redis(&fast).await?, &scope("two-tier"))?;
            broker.guarded(&queue, consumer).await?
        }
        other => return Err(format!("no variant {other}").into()),
    };
    broker.delete(&queue).await?;
    Ok(run)
}

/// One round of the chosen variants on `broker`.
/// The two-tier variants run in their order (each meets what the one before left), as one
/// group; every other round runs that group before the rest, so that neither side always runs
/// on a machine the other just warmed or loaded.
async fn round<B: Broker>(
    broker: &B,
    sql: &Sql,
    only: &[String],
    two_tiers_first: bool,
) -> Result<Vec<Run>, Error> {
    let chosen: Vec<&str> = VARIANTS
        .iter()
        .map(|(variant, _, _)| *variant)
        .filter(|variant| only.iter().any(|chosen| chosen == variant))
        .collect();
    let (tiers, rest): (Vec<&str>, Vec<&str>) = chosen
        .iter()
        .partition(|variant| variant.starts_with("two-tier"));
    let order = if two_tiers_first {
        [tiers, rest].concat()
    } else {
        [rest, tiers].concat()
    };
    let mut runs = Vec::new();
    for variant in order {
        runs.push((variant, run_variant(broker, sql, variant).await?));
    }
    // In the table's order.
    Ok(chosen
        .iter()
        .filter_map(|variant| {
            runs.iter()
                .find(|(ran, _)| ran == variant)
                .map(|(_, run)| *run)
        })
        .collect())
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// The medians of a variant's rounds: rate, then µs per message of the bench, PostgreSQL,
/// Redis, the broker, all.
fn medians(runs: &[Run], messages: usize) -> (f64, [f64; 5]) {
    let of = |part: fn(&Cpu) -> u64| {
        median(
            runs.iter()
                .map(|run| Cpu::per_message(part(&run.cpu), messages))
                .collect(),
        )
    };
    let cpu = [
        of(|cpu| cpu.bench),
        of(|cpu| cpu.postgres),
        of(|cpu| cpu.redis),
        of(|cpu| cpu.broker),
        of(Cpu::total),
    ];
    (median(runs.iter().map(|run| run.rate).collect()), cpu)
}

/// What each SQL variant sends per message, counted by proxies in front of PostgreSQL
/// (frontend messages) and Redis (commands): `messages` new keys per variant on `broker`.
async fn count<B: Broker>(
    broker: &B,
    database_url: &str,
    redis_url: &str,
    nonce: u128,
) -> Result<(), Error> {
    let pg = CountingProxy::start(upstream_of(database_url)?, Protocol::Postgres).await?;
    let log: Log = Arc::default();
    let redis_upstream = upstream_of(redis_url)?.to_string();
    let redis_proxy = counting_proxy(redis_upstream, Arc::clone(&log)).await;
    let pool = PgPool::connect(&plaintext_postgres(&through(database_url, pg.addr)?)).await?;
    let redis_url = through(redis_url, redis_proxy.parse()?)?;
    let sql = Sql::new(pool, redis_url, nonce).await?;
    let messages = broker.messages();
    println!();
    println!(
        "Sent per message ({messages} messages per variant, {}):",
        broker.name()
    );
    println!(
        "| variant | PG round trips | PG statements | PG pings (pool acquires) | Redis commands |"
    );
    println!("|---|---:|---:|---:|---:|");
    for (variant, label, _) in &VARIANTS[3..11] {
        let before = (pg.traffic.snapshot(), log.lock().map_or(0, |log| log.len()));
        run_variant(broker, &sql, variant).await?;
        let sent = pg.traffic.snapshot().since(&before.0);
        let commands = log.lock().map_or(0, |log| log.len()) - before.1;
        let per = |n: u64| n as f64 / messages as f64;
        println!(
            "| {label} | {:.2} | {:.2} | {:.2} | {:.2} |",
            per(sent.pg_round_trips() - sent.pg_pings()),
            per(sent.pg_statements()),
            per(sent.pg_pings()),
            per(commands as u64),
        );
    }
    sql.drop_tables().await
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let messages: usize = env_or("BENCH_MESSAGES", "5000").parse()?;
    let concurrency: usize = env_or("BENCH_CONCURRENCY", "16").parse()?;
    let rounds: usize = env_or("BENCH_ROUNDS", "1").parse()?;
    let counted: usize = env_or("BENCH_COUNT", "1000").parse()?;
    let all = VARIANTS.map(|(variant, _, _)| variant).join(",");
    let only: Vec<String> = env_or("BENCH_ONLY", &all)
        .split(',')
        .map(str::to_owned)
        .collect();
    let nonce = SystemTime::now().duration_since(UNIX_EPOCH)?.as_micros();
    let database_url = env_or("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test");
    let redis_url = env_or("REDIS_URL", "redis://127.0.0.1:6379");
    let application_name = format!("queue_bench_{nonce}");
    let options: PgConnectOptions = database_url.parse()?;
    let pool = PgPoolOptions::new()
        .connect_with(options.application_name(&application_name))
        .await?;
    cpu::install(pool.clone(), application_name);
    let amqp_url = env_or("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f");
    let rabbitmq = rabbitmq::RabbitMq::connect(&amqp_url, messages, concurrency, nonce).await?;
    let nats_url = env_or("NATS_URL", "nats://127.0.0.1:4222");
    let nats = nats::Nats::connect(&nats_url, messages, concurrency, nonce).await?;
    leftovers::sweep(&pool, nats.jetstream(), nonce).await?;

    println!(
        "{messages} messages, {concurrency} concurrent (RabbitMQ prefetch and NATS max_ack_pending {}), {rounds} round(s), medians",
        concurrency * 4
    );
    let (mut on_rabbitmq, mut on_nats) = (Vec::new(), Vec::new());
    for round_number in 0..rounds {
        // Tables of its own for each broker: both publish the same keys, and a dedup table the
        // other broker filled would answer every key as a duplicate (rolled back, not committed).
        let fresh = |broker: u128| {
            Sql::new(
                pool.clone(),
                redis_url.clone(),
                nonce + 2 * round_number as u128 + broker,
            )
        };
        let two_tiers_first = round_number % 2 == 1;
        let sql = fresh(0).await?;
        on_rabbitmq.push(round(&rabbitmq, &sql, &only, two_tiers_first).await?);
        let mut rows = sql.rows().await?;
        sql.drop_tables().await?;
        let sql = fresh(1).await?;
        on_nats.push(round(&nats, &sql, &only, two_tiers_first).await?);
        rows += sql.rows().await?;
        sql.drop_tables().await?;
        // Every variant with the business INSERT commits one row per message: fewer means a
        // variant answered messages as duplicates and measured the wrong thing.
        let committing = only
            .iter()
            .filter(|variant| COMMITTING.contains(&variant.as_str()))
            .count();
        let expected = (2 * committing * messages) as i64;
        eprintln!(
            "round {} done; business rows {rows} (expected {expected})",
            round_number + 1
        );
        if rows != expected {
            return Err(format!("business rows {rows}, expected {expected}").into());
        }
    }
    println!(
        "| variant | handler | RabbitMQ msg/s | CPU µs/msg: bench + PG + Redis + broker = all | NATS msg/s | CPU µs/msg |"
    );
    println!("|---|---|---:|---|---:|---|");
    let chosen: Vec<_> = VARIANTS
        .iter()
        .filter(|(variant, _, _)| only.iter().any(|chosen| chosen == variant))
        .collect();
    for (index, (_, label, handler)) in chosen.iter().enumerate() {
        let of = |runs: &[Vec<Run>]| {
            let runs: Vec<Run> = runs.iter().map(|round| round[index]).collect();
            medians(&runs, messages)
        };
        let (amqp, js) = (of(&on_rabbitmq), of(&on_nats));
        let cpu = |[bench, pg, redis, broker, all]: [f64; 5]| {
            format!("{bench:.0} + {pg:.0} + {redis:.0} + {broker:.0} = {all:.0}")
        };
        println!(
            "| {label} | {handler} | {:.0} | {} | {:.0} | {} |",
            amqp.0,
            cpu(amqp.1),
            js.0,
            cpu(js.1)
        );
    }
    // Each round's ratio (the two variants ran minutes apart at most), then their median:
    // steadier than a ratio of medians on a machine whose speed drifts.
    let index_of = |name: &str| chosen.iter().position(|(variant, _, _)| *variant == name);
    let ratios = |runs: &[Vec<Run>], tier: usize, base: usize| {
        let of = |value: fn(&Run) -> f64| {
            let per_round: Vec<f64> = runs
                .iter()
                .map(|round| value(&round[tier]) / value(&round[base]))
                .collect();
            let (low, high) = per_round
                .iter()
                .fold((f64::MAX, f64::MIN), |(l, h), r| (l.min(*r), h.max(*r)));
            (median(per_round), low, high)
        };
        (of(|run| run.rate), of(|run| run.cpu.total() as f64))
    };
    for baseline in ["post-mortem", "hand-written"] {
        if let (Some(tier), Some(base)) = (index_of("two-tier"), index_of(baseline)) {
            let line = |runs: &[Vec<Run>]| {
                let ((rate, low, high), (cpu, _, _)) = ratios(runs, tier, base);
                format!("{rate:.2} ({low:.2}–{high:.2}; CPU per message {cpu:.2})")
            };
            println!(
                "two tiers, new keys / {baseline}, median of the rounds' ratios: RabbitMQ {}, NATS {}",
                line(&on_rabbitmq),
                line(&on_nats),
            );
        }
    }
    if counted > 0 {
        let rabbitmq =
            rabbitmq::RabbitMq::connect(&amqp_url, counted, concurrency, nonce + 1000).await?;
        count(&rabbitmq, &database_url, &redis_url, nonce + 1000).await?;
    }
    Ok(())
}
