//! The RabbitMQ side of the coupon-grant example, shared by its consumer (`queue_rabbitmq`)
//! and its producer (`rabbitmq_publish`).

use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ConnectionProperties};

/// The broker when `AMQP_URL` is unset.
pub const DEFAULT_AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// `AMQP_URL`, or the local broker.
pub fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| DEFAULT_AMQP_URL.to_owned())
}

/// Connects to `url` and opens a channel.
pub async fn open(url: &str) -> Result<(Connection, Channel), lapin::Error> {
    let connection = Connection::connect(url, ConnectionProperties::default()).await?;
    let channel = connection.create_channel().await?;
    Ok((connection, channel))
}

/// Declares `queue` as both sides expect it: durable, so that deliveries outlive a broker
/// restart. Declaring an existing queue with the same arguments changes nothing.
pub async fn declare_queue(channel: &Channel, queue: &str) -> Result<(), lapin::Error> {
    channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await?;
    Ok(())
}
