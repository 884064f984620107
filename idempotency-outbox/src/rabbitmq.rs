//! RabbitMQ as a relay target (lapin), under publisher confirms.

use lapin::Confirmation;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use tokio::sync::Mutex;

use idempotency_core::sql::outbox::Claimed;

use crate::target::{DeliveryError, Target};

/// The header that carries the business key (the message id carries its derived id).
pub const BUSINESS_KEY_HEADER: &str = "business-key";

/// Publishes each message to an exchange with its topic as the routing key: persistent,
/// `mandatory`, the message id as AMQP `message-id`, the business key in the
/// [`BUSINESS_KEY_HEADER`] header. A message counts as delivered when the broker confirmed it;
/// a nack or an unroutable message (no queue bound) is refused; a failed connection makes the
/// batch's rest unreachable and is opened again for the next batch.
///
/// Consume on the other side with `idempotency_queue::MessageId` as the key extractor.
pub struct RabbitMqTarget {
    url: String,
    exchange: String,
    link: Mutex<Option<(Connection, Channel)>>,
}

impl RabbitMqTarget {
    /// A target publishing to `exchange` (`""`: the default exchange, the topic names the queue)
    /// on the broker at `url`; it connects at the first delivery.
    pub fn new(url: impl Into<String>, exchange: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            exchange: exchange.into(),
            link: Mutex::new(None),
        }
    }

    async fn open(&self) -> Result<(Connection, Channel), lapin::Error> {
        let connection = Connection::connect(&self.url, ConnectionProperties::default()).await?;
        let channel = connection.create_channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        Ok((connection, channel))
    }
}

fn properties(claimed: &Claimed) -> BasicProperties {
    let mut headers = FieldTable::default();
    headers.insert(
        BUSINESS_KEY_HEADER.into(),
        AMQPValue::LongString(LongString::from(claimed.message.key.as_str())),
    );
    BasicProperties::default()
        .with_message_id(claimed.message.id.as_str().into())
        .with_delivery_mode(2)
        .with_headers(headers)
}

fn unreachable(error: &lapin::Error) -> DeliveryError {
    DeliveryError::Unreachable(error.to_string())
}

impl Target for RabbitMqTarget {
    async fn deliver(&self, batch: &[Claimed]) -> Vec<Result<(), DeliveryError>> {
        let mut link = self.link.lock().await;
        if link
            .as_ref()
            .is_some_and(|(_, channel)| !channel.status().connected())
        {
            *link = None;
        }
        let channel = match &*link {
            Some((_, channel)) => channel.clone(),
            None => match self.open().await {
                Ok(opened) => {
                    let channel = opened.1.clone();
                    *link = Some(opened);
                    channel
                }
                Err(error) => return vec![Err(unreachable(&error)); batch.len()],
            },
        };
        let mandatory = BasicPublishOptions {
            mandatory: true,
            immediate: false,
        };
        // Publish the whole batch, then wait for the confirms: one round trip's latency, not one
        // per message.
        let mut confirms = Vec::with_capacity(batch.len());
        for claimed in batch {
            let published = channel
                .basic_publish(
                    self.exchange.as_str().into(),
                    claimed.message.topic.as_str().into(),
                    mandatory,
                    &claimed.message.payload,
                    properties(claimed),
                )
                .await;
            confirms.push(published);
        }
        let mut results = Vec::with_capacity(batch.len());
        let mut broken = false;
        for confirm in confirms {
            let result = match confirm {
                Err(error) => Err(unreachable(&error)),
                Ok(confirm) => match confirm.await {
                    Ok(Confirmation::Ack(None)) => Ok(()),
                    Ok(Confirmation::Ack(Some(_))) => Err(DeliveryError::Refused(
                        "unroutable: no queue is bound for its topic".to_owned(),
                    )),
                    Ok(Confirmation::Nack(_)) => {
                        Err(DeliveryError::Refused("the broker nacked it".to_owned()))
                    }
                    Ok(Confirmation::NotRequested) => Err(DeliveryError::Unreachable(
                        "the channel is not in confirm mode".to_owned(),
                    )),
                    Err(error) => Err(unreachable(&error)),
                },
            };
            broken |= matches!(result, Err(DeliveryError::Unreachable(_)));
            results.push(result);
        }
        if broken {
            *link = None;
        }
        results
    }
}
