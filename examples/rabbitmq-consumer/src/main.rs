//! The incident's coupon-grant consumer on RabbitMQ: the payment gateway's "paid" event for each
//! trade is delivered six times (producer retries), one delivery fails once and is redelivered;
//! the consumer grants one coupon per trade and prints the counts.
//!
//! ```text
//! AMQP_URL=amqp://guest:guest@127.0.0.1:5672 \
//!   cargo run -p rabbitmq-consumer
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idempotency_core::{Idempotency, MemoryStore, Scope};
use idempotency_queue::{Backoff, IdempotentConsumer, Job, JsonField, rabbitmq};
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, ExchangeDeleteOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};

const TRADES: usize = 10;
const DELIVERIES_PER_TRADE: usize = 6;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned());
    let connection = Connection::connect(&url, ConnectionProperties::default()).await?;
    let channel = connection.create_channel().await?;
    let nonce = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos();
    let queue = format!("coupon-grant-demo-{nonce}");
    channel
        .queue_declare(
            queue.as_str().into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await?;
    // Rejected messages (no trade number, a trade reused with another payload) land in
    // `<queue>.dead` with their reason, never dropped.
    let dead_letters = rabbitmq::DeadLetters::declare(&connection, &queue).await?;

    // The gateway retries: every trade's event arrives six times.
    for round in 0..DELIVERIES_PER_TRADE {
        for trade in 0..TRADES {
            let body = format!(
                r#"{{"trade_no":"T{nonce}-{trade}","user_id":{trade},"coupon":"WELCOME10"}}"#
            );
            channel
                .basic_publish(
                    "".into(),
                    queue.as_str().into(),
                    BasicPublishOptions::default(),
                    body.as_bytes(),
                    BasicProperties::default()
                        .with_message_id(format!("msg-{round}-{trade}").into()),
                )
                .await?
                .await?;
        }
    }
    println!(
        "published {} deliveries for {TRADES} trades",
        TRADES * DELIVERIES_PER_TRADE
    );

    // The coupon service: one coupon per call it receives; it fails once (a network blip).
    let coupons: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let granted = Arc::clone(&coupons);
    let blip = Arc::new(AtomicBool::new(true));
    let consumer = Arc::new(
        IdempotentConsumer::new(
            Idempotency::new(MemoryStore::new()),
            Scope::new("coupon-grant"),
            JsonField::new("/trade_no"),
            move |job: Job| {
                let granted = Arc::clone(&granted);
                let blip = Arc::clone(&blip);
                async move {
                    if blip.swap(false, Ordering::SeqCst) {
                        return Err("coupon service timed out");
                    }
                    *granted
                        .lock()
                        .map_err(|_| "poisoned")?
                        .entry(job.key.to_string())
                        .or_default() += 1;
                    Ok(())
                }
            },
        )
        .with_backoff(Backoff::new(
            Duration::from_millis(100),
            Duration::from_secs(1),
        )),
    );

    let consume_channel = connection.create_channel().await?;
    consume_channel
        .basic_qos(32, BasicQosOptions::default())
        .await?;
    let deliveries = consume_channel
        .basic_consume(
            queue.as_str().into(),
            "coupon-granter".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    let running = Arc::clone(&consumer);
    let task =
        tokio::spawn(
            async move { rabbitmq::consume(&running, deliveries, &dead_letters, 16).await },
        );

    let expected = (TRADES * DELIVERIES_PER_TRADE) as u64;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while consumer.stats().snapshot().acked() < expected && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    task.abort();

    let stats = consumer.stats().snapshot();
    let coupons = coupons.lock().map_err(|_| "poisoned")?.clone();
    let total: u32 = coupons.values().sum();
    println!("deliveries acked:        {}", stats.acked());
    println!("  processed (granted):   {}", stats.processed);
    println!("  duplicates (acked):    {}", stats.duplicates);
    println!("failed and redelivered:  {}", stats.failed);
    println!("in flight, requeued:     {}", stats.in_flight);
    println!(
        "coupons granted:         {total} for {} trades",
        coupons.len()
    );
    let dead = rabbitmq::dead_letter_name(&queue);
    for name in [&queue, &dead] {
        channel
            .queue_delete(name.as_str().into(), QueueDeleteOptions::default())
            .await?;
    }
    channel
        .exchange_delete(dead.as_str().into(), ExchangeDeleteOptions::default())
        .await?;
    if total as usize != TRADES || coupons.values().any(|&n| n != 1) {
        return Err("a trade got other than exactly one coupon".into());
    }
    Ok(())
}
