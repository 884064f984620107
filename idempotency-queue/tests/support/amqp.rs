//! RabbitMQ helpers the queue tests share.

use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel};

/// Publishes `body` to `queue` through the default exchange, confirmed, with the business key
/// (if any) in the `business-key` header.
pub(crate) async fn publish<'a>(
    channel: &Channel,
    queue: &str,
    key: impl Into<Option<&'a str>>,
    body: &str,
) {
    let mut headers = FieldTable::default();
    if let Some(key) = key.into() {
        headers.insert(
            "business-key".into(),
            AMQPValue::LongString(LongString::from(key)),
        );
    }
    channel
        .basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            body.as_bytes(),
            BasicProperties::default().with_headers(headers),
        )
        .await
        .unwrap()
        .await
        .unwrap();
}

/// Messages ready in `queue` (not counting unacked ones).
pub(crate) async fn ready(channel: &Channel, queue: &str) -> u32 {
    channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap()
        .message_count()
}
