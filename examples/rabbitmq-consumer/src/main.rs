//! The incident's coupon service as a RabbitMQ consumer: it consumes the "paid" events of queue
//! `QUEUE` (default `coupon-grant`) at `AMQP_URL`, from any producer, and grants one coupon per
//! trade in PostgreSQL (`coupon_grants` at `DATABASE_URL`), however often an event is delivered.
//! Two tiers when `REDIS_URL` is set; see the `coupon-grants` crate for every variable.
//!
//! ```text
//! cargo run -p rabbitmq-consumer                                             # the service
//! cargo run -p rabbitmq-consumer --bin rabbitmq_publish -- --trades 3 --copies 6   # the gateway
//! ```
//!
//! Rejected messages (no `trade_no`, a payload that is not a paid event, a trade number reused
//! with another payload) go to the queue `<QUEUE>.dead` with their reason. The connection is
//! opened again whenever it fails. SIGTERM or Ctrl-C stop it gracefully: no new deliveries,
//! the ones in hand finish and are acked, then it exits.

use std::process::ExitCode;
use std::time::Duration;

use coupon_grants::{Settings, coupon_consumer};
use idempotency_queue::rabbitmq;
use lapin::options::{BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use sqlx::postgres::PgPoolOptions;
use tokio::sync::Notify;

/// How long the deliveries in hand get to finish after SIGTERM.
const GRACE: Duration = Duration::from_secs(30);

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("queue_rabbitmq: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    coupon_grants::init_logging();
    let settings = Settings::from_env()?;
    let url = rabbitmq_consumer::amqp_url();
    let pool = PgPoolOptions::new()
        .max_connections(u32::try_from(settings.concurrency).unwrap_or(u32::MAX))
        .connect(&settings.database_url)
        .await?;
    let consumer = coupon_consumer(&settings, pool).await?;
    let queue = settings.queue.as_str();
    let prefetch = u16::try_from(settings.concurrency * 2).unwrap_or(u16::MAX);

    let open = || async {
        let (connection, channel) = rabbitmq_consumer::open(&url).await?;
        channel
            .basic_qos(prefetch, BasicQosOptions::default())
            .await?;
        rabbitmq_consumer::declare_queue(&channel, queue).await?;
        let dead_letters = rabbitmq::DeadLetters::declare(&connection, queue).await?;
        let deliveries = channel
            .basic_consume(
                queue.into(),
                "coupon-grants".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        println!("consuming {queue}");
        Ok(rabbitmq::Session {
            connection,
            deliveries,
            dead_letters,
        })
    };
    let stopping = Notify::new();
    let shutdown = async {
        coupon_grants::shutdown_signal().await;
        println!("stopping: no new deliveries, finishing the ones in hand");
        stopping.notify_one();
    };
    tokio::select! {
        served = rabbitmq::serve_reconnecting(&consumer, open)
            .concurrency(settings.concurrency)
            .with_graceful_shutdown(shutdown) => served?,
        () = async { stopping.notified().await; tokio::time::sleep(GRACE).await } => {
            eprintln!("queue_rabbitmq: deliveries still in hand after {GRACE:?}; the broker redelivers them");
        }
    }
    println!("{}", coupon_grants::summary(&consumer.stats().snapshot()));
    Ok(())
}
