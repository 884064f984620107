//! The incident's coupon-grant consumer on NATS JetStream: every trade's "paid" event is published
//! six times, one delivery fails once and is redelivered (`-NAK` with a delay); the consumer
//! grants one coupon per trade and prints the counts.
//!
//! ```text
//! NATS_URL=nats://127.0.0.1:4222 cargo run -p nats-consumer
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::HeaderMap;
use async_nats::jetstream::{self, consumer::pull, stream};
use idempotency_core::{Idempotency, MemoryStore, Scope};
use idempotency_queue::{Backoff, Header, IdempotentConsumer, Job, nats};

const TRADES: usize = 10;
const DELIVERIES_PER_TRADE: usize = 6;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned());
    let js = jetstream::new(async_nats::connect(&url).await?);
    let nonce = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos();
    let name = format!("COUPON-GRANT-DEMO-{nonce}");
    let subject = format!("payments.paid.{nonce}");
    let stream = js
        .create_stream(stream::Config {
            name: name.clone(),
            subjects: vec![subject.clone()],
            ..Default::default()
        })
        .await?;
    // Rejected messages (no trade number, a trade reused with another payload) go to
    // `dead.<subject>` in a stream of their own with their reason, then are terminated.
    let dead_stream = format!("{name}-DEAD");
    let dead_letters =
        nats::DeadLetters::declare(js.clone(), &dead_stream, &format!("dead.{subject}"))
            .await
            .map_err(|error| error.to_string())?;

    // The gateway retries: every trade's event is published six times, the business key in a
    // header (not `Nats-Msg-Id`, which JetStream would dedup at publish within its window).
    for _round in 0..DELIVERIES_PER_TRADE {
        for trade in 0..TRADES {
            let mut headers = HeaderMap::new();
            headers.insert("trade-no", format!("T{nonce}-{trade}").as_str());
            let body = format!(r#"{{"user_id":{trade},"coupon":"WELCOME10"}}"#);
            js.publish_with_headers(subject.clone(), headers, body.into())
                .await?
                .await?;
        }
    }
    println!(
        "published {} messages for {TRADES} trades",
        TRADES * DELIVERIES_PER_TRADE
    );

    let coupons: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let granted = Arc::clone(&coupons);
    let blip = Arc::new(AtomicBool::new(true));
    let consumer = Arc::new(
        IdempotentConsumer::new(
            Idempotency::new(MemoryStore::new()),
            Scope::new("coupon-grant"),
            Header::new("trade-no"),
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

    let pull = stream
        .create_consumer(pull::Config {
            durable_name: Some("coupon-granter".to_owned()),
            ack_wait: Duration::from_secs(30),
            max_deliver: 10,
            ..Default::default()
        })
        .await?;
    let running = Arc::clone(&consumer);
    // In-progress marks every third of the consumer's `ack_wait` (10 s here).
    let task =
        tokio::spawn(async move { nats::consume_pull(&running, &pull, &dead_letters, 16).await });

    let expected = (TRADES * DELIVERIES_PER_TRADE) as u64;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while consumer.stats().snapshot().acked() < expected && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    task.abort();

    let stats = consumer.stats().snapshot();
    let coupons = coupons.lock().map_err(|_| "poisoned")?.clone();
    let total: u32 = coupons.values().sum();
    println!("messages acked:          {}", stats.acked());
    println!("  processed (granted):   {}", stats.processed);
    println!("  duplicates (acked):    {}", stats.duplicates);
    println!("failed and redelivered:  {}", stats.failed);
    println!("in flight, requeued:     {}", stats.in_flight);
    println!(
        "coupons granted:         {total} for {} trades",
        coupons.len()
    );
    js.delete_stream(&name).await?;
    js.delete_stream(&dead_stream).await?;
    if total as usize != TRADES || coupons.values().any(|&n| n != 1) {
        return Err("a trade got other than exactly one coupon".into());
    }
    Ok(())
}
