//! What the transactional outbox costs, in one run against real PostgreSQL and RabbitMQ:
//!
//! 1. the business transaction with the outbox enqueue inside vs the bare transaction
//!    (sequential, one at a time: latency per transaction);
//! 2. relay throughput (committed messages claimed, published under confirms, marked sent; in
//!    batches of 100), one relay and two on one outbox, vs a raw publish loop of the same
//!    messages with the same confirm pattern;
//! 3. latency from the callback's commit to the coupon committed in the coupon service's own
//!    database (relay woken by LISTEN/NOTIFY, consumer with the SQL truth), one trade at a time.
//!
//! ```text
//! cargo build --release -p idempotency-bench --features outbox --bin outbox_bench
//! BENCH_TXS=2000 BENCH_MESSAGES=5000 BENCH_TRADES=300 target/release/outbox_bench
//! ```
//!
//! `DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/test`; the coupon service's
//! database `outbox_bench_coupons` is created on the same server) and `AMQP_URL`.
#![allow(clippy::print_stdout)]

use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idempotency_core::{Idempotency, IdempotencyKey, MemoryStore, Scope};
use idempotency_outbox::Relay;
use idempotency_outbox::rabbitmq::RabbitMqTarget;
use idempotency_outbox::{Outbox, OutboxMessage};
use idempotency_queue::two_tier::{Json, SqlTruth, Tx};
use idempotency_queue::{IdempotentConsumer, Job, MessageId, rabbitmq};
use idempotency_sql::PostgresStore;
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueDeclareOptions, QueueDeleteOptions, QueuePurgeOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, Postgres};
use tokio::sync::mpsc;

type Error = Box<dyn std::error::Error + Send + Sync>;

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

fn count(name: &str, default: usize) -> Result<usize, Error> {
    Ok(env_or(name, &default.to_string()).parse()?)
}

/// p50 and p99 of `samples`, in microseconds.
fn percentiles(mut samples: Vec<Duration>) -> (u128, u128) {
    samples.sort();
    let at = |q: f64| {
        let index = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples.get(index).map_or(0, Duration::as_micros)
    };
    (at(0.50), at(0.99))
}

/// A unique suffix for this run's tables and queue.
fn nonce() -> Result<String, Error> {
    let mut bytes = [0u8; 4];
    getrandom::fill(&mut bytes).map_err(|error| error.to_string())?;
    Ok(hex::encode(bytes))
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let url = env_or("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test");
    let amqp_url = env_or("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f");
    let (txs, messages, trades) = (
        count("BENCH_TXS", 2000)?,
        count("BENCH_MESSAGES", 5000)?,
        count("BENCH_TRADES", 300)?,
    );
    let run = nonce()?;
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .connect(&url)
        .await?;
    let outbox = Outbox::postgres(pool.clone()).with_table_name(&format!("outbox_bench_{run}"))?;
    outbox.migrate().await?;
    let orders = format!("orders_bench_{run}");
    sqlx::query(&format!(
        "CREATE TABLE {orders} (trade_no TEXT PRIMARY KEY, state TEXT NOT NULL)"
    ))
    .execute(&pool)
    .await?;
    let amqp = Connection::connect(&amqp_url, ConnectionProperties::default()).await?;
    let channel = amqp.create_channel().await?;
    let queue = format!("outbox-bench-{run}");
    channel
        .queue_declare(
            queue.as_str().into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await?;
    println!("outbox_bench: {txs} transactions, {messages} messages, {trades} trades (run {run})");

    // 1. The business transaction, bare and with the enqueue inside.
    let scope = Scope::new("bench.grant");
    let insert = format!("INSERT INTO {orders} (trade_no, state) VALUES ($1, 'paid')");
    for with_outbox in [false, true] {
        let mut samples = Vec::with_capacity(txs);
        let started = Instant::now();
        for n in 0..txs {
            let trade = format!("{}-{n}", if with_outbox { "O" } else { "B" });
            let begun = Instant::now();
            let mut tx = pool.begin().await?;
            sqlx::query(&insert).bind(&trade).execute(&mut *tx).await?;
            if with_outbox {
                let key = IdempotencyKey::parse(&trade)?;
                let message = OutboxMessage::new(
                    &scope,
                    &key,
                    queue.as_str(),
                    format!(r#"{{"trade_no":"{trade}"}}"#),
                );
                outbox.enqueue(&mut tx, &message).await?;
            }
            tx.commit().await?;
            samples.push(begun.elapsed());
        }
        let rate = txs as f64 / started.elapsed().as_secs_f64();
        let (p50, p99) = percentiles(samples);
        let name = if with_outbox {
            "business tx + outbox enqueue"
        } else {
            "bare business tx"
        };
        println!("  {name:<34} {rate:>8.0} tx/s   p50 {p50:>5} µs   p99 {p99:>6} µs");
    }

    // 2. Relay throughput vs a raw publish loop of the same messages.
    let relay =
        Relay::new(outbox.clone(), RabbitMqTarget::new(amqp_url.clone(), "")).with_batch_size(100);
    relay.drain().await?; // part 1's messages, untimed
    channel
        .queue_purge(queue.as_str().into(), QueuePurgeOptions::default())
        .await?;
    let batch = enqueue_trades(&outbox, &pool, &scope, &queue, "R", messages).await?;
    let started = Instant::now();
    let drained = relay.drain().await?;
    let relay_rate = drained.sent as f64 / started.elapsed().as_secs_f64();
    channel
        .queue_purge(queue.as_str().into(), QueuePurgeOptions::default())
        .await?;

    // The same messages again, drained by two relays at once (disjoint batches).
    enqueue_trades(&outbox, &pool, &scope, &queue, "R2", messages).await?;
    let started = Instant::now();
    let pair: Vec<_> = (0..2)
        .map(|_| {
            let relay = Relay::new(outbox.clone(), RabbitMqTarget::new(amqp_url.clone(), ""))
                .with_batch_size(100);
            tokio::spawn(async move { relay.drain().await })
        })
        .collect();
    let mut pair_sent = 0;
    for relay in pair {
        pair_sent += relay.await??.sent;
    }
    let pair_rate = pair_sent as f64 / started.elapsed().as_secs_f64();
    channel
        .queue_purge(queue.as_str().into(), QueuePurgeOptions::default())
        .await?;

    let raw = amqp.create_channel().await?;
    raw.confirm_select(ConfirmSelectOptions::default()).await?;
    let started = Instant::now();
    for chunk in batch.chunks(100) {
        let mut confirms = Vec::with_capacity(chunk.len());
        for message in chunk {
            let properties = BasicProperties::default()
                .with_message_id(message.id.as_str().into())
                .with_delivery_mode(2);
            confirms.push(
                raw.basic_publish(
                    "".into(),
                    queue.as_str().into(),
                    BasicPublishOptions {
                        mandatory: true,
                        immediate: false,
                    },
                    &message.payload,
                    properties,
                )
                .await?,
            );
        }
        for confirm in confirms {
            confirm.await?;
        }
    }
    let raw_rate = messages as f64 / started.elapsed().as_secs_f64();
    channel
        .queue_purge(queue.as_str().into(), QueuePurgeOptions::default())
        .await?;
    println!(
        "  relay (claim, publish, confirm, mark) {relay_rate:>8.0} msg/s ({} sent)",
        drained.sent
    );
    println!("  two relays on one outbox              {pair_rate:>8.0} msg/s ({pair_sent} sent)");
    println!("  raw publish loop, same confirms       {raw_rate:>8.0} msg/s");

    // 3. Commit to coupon, across two databases.
    let coupons_pool = coupon_database(&url).await?;
    let coupons = format!("coupons_bench_{run}");
    sqlx::query(&format!(
        "CREATE TABLE {coupons} (id BIGSERIAL PRIMARY KEY, trade_no TEXT NOT NULL)"
    ))
    .execute(&coupons_pool)
    .await?;
    let truth_store = PostgresStore::new(coupons_pool.clone())
        .with_table_name(&format!("coupon_dedup_bench_{run}"))?;
    truth_store.migrate().await?;
    #[derive(serde::Deserialize)]
    struct Paid {
        trade_no: String,
    }
    let grant = format!("INSERT INTO {coupons} (trade_no) VALUES ($1) RETURNING id");
    let truth = Arc::new(SqlTruth::new(
        truth_store,
        scope.clone(),
        move |tx: Tx<Postgres>, Json(paid): Json<Paid>| {
            let grant = grant.clone();
            async move {
                sqlx::query_scalar::<_, i64>(&grant)
                    .bind(paid.trade_no)
                    .fetch_one(&mut *tx.conn().await)
                    .await
            }
        },
    ));
    let (committed, mut coupon_at) = mpsc::unbounded_channel();
    let handler = move |job: Job| {
        let (truth, committed) = (Arc::clone(&truth), committed.clone());
        async move {
            let handled = truth.run(&job).await?;
            // The coupon and its dedup record have committed.
            let _ = committed.send((job.key.to_string(), Instant::now()));
            Ok::<_, idempotency_queue::two_tier::TruthError<sqlx::Error>>(handled)
        }
    };
    let consumer = Arc::new(IdempotentConsumer::new(
        Idempotency::new(MemoryStore::new()),
        scope.clone(),
        MessageId,
        handler,
    ));
    let consume_channel = amqp.create_channel().await?;
    consume_channel
        .basic_qos(32, BasicQosOptions::default())
        .await?;
    let deliveries = consume_channel
        .basic_consume(
            queue.as_str().into(),
            "bench".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    let consuming = {
        let consumer = Arc::clone(&consumer);
        tokio::spawn(async move {
            rabbitmq::serve(
                &consumer,
                deliveries,
                &rabbitmq::DeadLetters::drop_and_log(),
            )
            .concurrency(8)
            .await
        })
    };
    let running = Relay::new(outbox.clone(), RabbitMqTarget::new(amqp_url.clone(), ""));
    let relaying = tokio::spawn(async move { running.run().await });
    tokio::time::sleep(Duration::from_millis(500)).await; // the relay is listening
    let mut samples = Vec::with_capacity(trades);
    for n in 0..trades {
        let trade = format!("L-{n}");
        let key = IdempotencyKey::parse(&trade)?;
        let message = OutboxMessage::new(
            &scope,
            &key,
            queue.as_str(),
            format!(r#"{{"trade_no":"{trade}"}}"#),
        );
        let mut tx = pool.begin().await?;
        sqlx::query(&insert).bind(&trade).execute(&mut *tx).await?;
        outbox.enqueue(&mut tx, &message).await?;
        tx.commit().await?;
        let committed_at = Instant::now();
        loop {
            let (id, at) = tokio::time::timeout(Duration::from_secs(30), coupon_at.recv())
                .await?
                .ok_or("the consumer stopped")?;
            if id == message.id {
                samples.push(at.saturating_duration_since(committed_at));
                break;
            }
        }
    }
    let (p50, p99) = percentiles(samples);
    println!("  commit -> coupon committed (2 dbs)    p50 {p50:>5} µs   p99 {p99:>6} µs");

    relaying.abort();
    consuming.abort();
    for statement in [
        format!("DROP TABLE {orders}"),
        format!("DROP TABLE outbox_bench_{run}"),
        format!("DELETE FROM idempotency_schema WHERE table_name = 'outbox_bench_{run}'"),
    ] {
        sqlx::query(&statement).execute(&pool).await?;
    }
    for statement in [
        format!("DROP TABLE {coupons}"),
        format!("DROP TABLE coupon_dedup_bench_{run}"),
        format!("DELETE FROM idempotency_schema WHERE table_name = 'coupon_dedup_bench_{run}'"),
    ] {
        sqlx::query(&statement).execute(&coupons_pool).await?;
    }
    channel
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await?;
    Ok(())
}

/// The coupon service's own database on the same server, created if missing.
/// Enqueues `count` grants of trades `<prefix>-0…` to `queue`, 500 per transaction; the
/// messages.
async fn enqueue_trades(
    outbox: &Outbox<Postgres>,
    pool: &PgPool,
    scope: &Scope,
    queue: &str,
    prefix: &str,
    count: usize,
) -> Result<Vec<OutboxMessage>, Error> {
    let messages: Vec<OutboxMessage> = (0..count)
        .map(|n| {
            let trade = format!("{prefix}-{n}");
            let key = IdempotencyKey::parse(&trade)?;
            let payload = format!(r#"{{"trade_no":"{trade}"}}"#);
            Ok(OutboxMessage::new(scope, &key, queue, payload))
        })
        .collect::<Result<_, Error>>()?;
    for chunk in messages.chunks(500) {
        let mut tx = pool.begin().await?;
        for message in chunk {
            outbox.enqueue(&mut tx, message).await?;
        }
        tx.commit().await?;
    }
    Ok(messages)
}

async fn coupon_database(url: &str) -> Result<PgPool, Error> {
    const NAME: &str = "outbox_bench_coupons";
    let server = PgConnectOptions::from_str(url)?;
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(server.clone())
        .await?;
    let exists: Option<i32> = sqlx::query_scalar("SELECT 1 FROM pg_database WHERE datname = $1")
        .bind(NAME)
        .fetch_optional(&admin)
        .await?;
    if exists.is_none() {
        sqlx::query(&format!("CREATE DATABASE {NAME}"))
            .execute(&admin)
            .await?;
    }
    Ok(PgPoolOptions::new()
        .max_connections(8)
        .connect_with(server.database(NAME))
        .await?)
}
