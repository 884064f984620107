//! The payment gateway as a RabbitMQ producer: every trade's "paid" event, published several
//! times (its retries) to queue `QUEUE` at `AMQP_URL`, persistent, each one confirmed.
//!
//! ```text
//! cargo run -p rabbitmq-consumer --bin rabbitmq_publish -- --trades 3 --copies 6
//! ```

use std::process::ExitCode;

use coupon_grants::{Publication, Settings};
use lapin::BasicProperties;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let publication = match Publication::from_args(std::env::args().skip(1)) {
        Ok(publication) => publication,
        Err(error) => {
            eprintln!("rabbitmq_publish: {error}");
            return ExitCode::from(2);
        }
    };
    match publish(&publication).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("rabbitmq_publish: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn publish(
    publication: &Publication,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let queue = Settings::from_env()?.queue;
    let (connection, channel) = rabbitmq_consumer::open(&rabbitmq_consumer::amqp_url()).await?;
    rabbitmq_consumer::declare_queue(&channel, &queue).await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    let mut published = 0;
    for payload in publication.payloads() {
        channel
            .basic_publish(
                "".into(),
                queue.as_str().into(),
                BasicPublishOptions::default(),
                &payload,
                BasicProperties::default()
                    .with_content_type("application/json".into())
                    .with_delivery_mode(2),
            )
            .await?
            .await?;
        published += 1;
    }
    println!(
        "published {published} deliveries of {} trades ({}1…) to {queue}",
        publication.trades, publication.prefix
    );
    connection.close(200, "done".into()).await?;
    Ok(())
}
