//! The incident's coupon service as a NATS JetStream consumer: it consumes the "paid" events of
//! subject `QUEUE` (default `coupon-grant`; stream [`stream_name`](nats_consumer::stream_name)
//! of it, created if missing) at `NATS_URL`, from any producer, through the durable pull consumer
//! `coupon-grants`, and grants one coupon per trade in PostgreSQL (`coupon_grants` at
//! `DATABASE_URL`), however often an event is delivered. Two tiers when `REDIS_URL` is set; see
//! the `coupon-grants` crate for every variable.
//!
//! ```text
//! cargo run -p nats-consumer                                            # the service
//! cargo run -p nats-consumer --bin nats_publish -- --trades 3 --copies 6   # the gateway
//! ```
//!
//! Rejected messages go to the subject `<QUEUE>.dead` (stream `<STREAM>_DEAD`) with their
//! reason, then are terminated. The client reconnects by itself and the pull starts again.
//! SIGTERM or Ctrl-C stop it gracefully: no new messages, the ones in hand finish and are
//! acked, then it exits. What the client had fetched but not started, or what is still in hand
//! after 30 s, is redelivered after [`ACK_WAIT`](nats_consumer::ACK_WAIT), and the records keep
//! it from running twice.

use std::process::ExitCode;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull};
use coupon_grants::{Settings, coupon_consumer};
use idempotency_queue::nats;
use sqlx::postgres::PgPoolOptions;
use tokio::sync::Notify;

/// How long the messages in hand get to finish after SIGTERM.
const GRACE: Duration = Duration::from_secs(30);

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("queue_nats: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    coupon_grants::init_logging();
    let settings = Settings::from_env()?;
    let pool = PgPoolOptions::new()
        .max_connections(u32::try_from(settings.concurrency).unwrap_or(u32::MAX))
        .connect(&settings.database_url)
        .await?;
    let consumer = coupon_consumer(&settings, pool).await?;
    let subject = settings.queue.as_str();
    let client = async_nats::connect(nats_consumer::nats_url()).await?;
    let js = jetstream::new(client.clone());
    let stream = nats_consumer::ensure_stream(&js, subject).await?;
    let dead_stream = format!("{}_DEAD", nats_consumer::stream_name(subject));
    let dead_letters =
        nats::DeadLetters::declare(js.clone(), &dead_stream, &format!("{subject}.dead")).await?;
    let pull = stream
        .get_or_create_consumer(
            "coupon-grants",
            pull::Config {
                durable_name: Some("coupon-grants".to_owned()),
                filter_subject: subject.to_owned(),
                ack_wait: nats_consumer::ACK_WAIT,
                max_ack_pending: i64::try_from(settings.concurrency * 2).unwrap_or(i64::MAX),
                ..Default::default()
            },
        )
        .await?;
    println!("consuming {subject}");
    let stopping = Notify::new();
    let shutdown = async {
        coupon_grants::shutdown_signal().await;
        println!("stopping: no new messages, finishing the ones in hand");
        stopping.notify_one();
    };
    tokio::select! {
        served = nats::serve_reconnecting(&consumer, &pull, &dead_letters)
            .concurrency(settings.concurrency)
            .with_graceful_shutdown(shutdown) => served?,
        () = async { stopping.notified().await; tokio::time::sleep(GRACE).await } => {
            eprintln!("queue_nats: messages still in hand after {GRACE:?}; JetStream redelivers them");
        }
    }
    // The last acks leave the client before the process ends.
    client.flush().await?;
    println!("{}", coupon_grants::summary(&consumer.stats().snapshot()));
    Ok(())
}
