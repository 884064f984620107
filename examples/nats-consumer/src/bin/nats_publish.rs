//! The payment gateway as a NATS JetStream producer: every trade's "paid" event, published
//! several times (its retries) to subject `QUEUE` at `NATS_URL`, each one acknowledged by the
//! stream. No `Nats-Msg-Id`: the gateway's retries are separate messages, as they are in the
//! incident (JetStream would otherwise drop them at publish, within its duplicate window).
//!
//! ```text
//! cargo run -p nats-consumer --bin nats_publish -- --trades 3 --copies 6
//! ```

use std::process::ExitCode;

use async_nats::jetstream;
use coupon_grants::{Publication, Settings};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let publication = match Publication::from_args(std::env::args().skip(1)) {
        Ok(publication) => publication,
        Err(error) => {
            eprintln!("nats_publish: {error}");
            return ExitCode::from(2);
        }
    };
    match publish(&publication).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("nats_publish: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn publish(
    publication: &Publication,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let subject = Settings::from_env()?.queue;
    let js = jetstream::new(async_nats::connect(nats_consumer::nats_url()).await?);
    nats_consumer::ensure_stream(&js, &subject).await?;
    let mut published = 0;
    for payload in publication.payloads() {
        js.publish(subject.clone(), payload.into()).await?.await?;
        published += 1;
    }
    println!(
        "published {published} messages of {} trades ({}1…) to {subject}",
        publication.trades, publication.prefix
    );
    Ok(())
}
