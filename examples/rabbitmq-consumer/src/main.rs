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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use coupon_grants::{Settings, coupon_consumer};
use idempotency_queue::rabbitmq;
use lapin::options::{BasicCancelOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Connection};
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

/// The connection and channel deliveries come from now, and its consumer tag: what a graceful
/// stop cancels, then closes (which sends the last acks).
type Consuming = Arc<Mutex<Option<(Connection, Channel, String)>>>;

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

    let consuming: Consuming = Arc::default();
    let stopping = Arc::new(AtomicBool::new(false));
    let drained = Arc::new(Notify::new());
    let session = || {
        let (consuming, stopping, drained, url) = (&consuming, &stopping, &drained, &url);
        async move {
            if stopping.load(Ordering::SeqCst) {
                // Stopping: the last session's deliveries are settled; consume no more.
                drained.notify_one();
                std::future::pending::<()>().await;
            }
            let (connection, channel) = rabbitmq_consumer::open(url).await?;
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
            let tag = deliveries.tag().to_string();
            *consuming
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) =
                Some((connection, channel, tag));
            println!("consuming {queue}");
            Ok((deliveries, dead_letters))
        }
    };
    let run = rabbitmq::consume_reconnecting(&consumer, settings.concurrency, session);
    tokio::pin!(run);
    tokio::select! {
        () = &mut run => return Ok(()),
        () = coupon_grants::shutdown_signal() => {}
    }

    println!("stopping: no new deliveries, finishing the ones in hand");
    stopping.store(true, Ordering::SeqCst);
    let current = consuming
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .take();
    if let Some((_, channel, tag)) = &current {
        channel
            .basic_cancel(tag.as_str().into(), BasicCancelOptions::default())
            .await?;
    }
    tokio::select! {
        () = &mut run => {}
        () = drained.notified() => {}
        () = tokio::time::sleep(GRACE) => eprintln!("queue_rabbitmq: deliveries still in hand after {GRACE:?}; the broker redelivers them"),
    }
    if let Some((connection, _, _)) = current {
        // Closing flushes the acks still queued in the client; the broker requeues anything
        // unacked.
        connection.close(200, "stopping".into()).await?;
    }
    println!("{}", coupon_grants::summary(&consumer.stats().snapshot()));
    Ok(())
}
