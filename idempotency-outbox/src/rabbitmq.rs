//! RabbitMQ as a relay target (lapin), under publisher confirms.

use std::collections::HashSet;

use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{
    BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, ExchangeKind,
};
use tokio::sync::Mutex;

use crate::table::Claimed;

use crate::target::{DeliveryError, DestinationError, Target};

/// The header that carries the business key (the message id carries its derived id).
pub const BUSINESS_KEY_HEADER: &str = "business-key";

/// Publishes each message to an exchange with its topic as the routing key: persistent,
/// `mandatory`, the message id as AMQP `message-id`, the business key in the
/// [`BUSINESS_KEY_HEADER`] header. A message counts as delivered when the broker confirmed it;
/// a nack refuses it; an unroutable message (no queue bound for its topic) has
/// [no destination](DeliveryError::NoDestination): deferred uncounted while younger than the
/// relay's grace; a failed connection makes the batch's rest unreachable and is opened again
/// for the next batch.
///
/// Who declares the queue is yours to choose, so the relay may start before the consumer:
/// - by default the consumer does, and messages published before it did wait in the outbox
///   (deferred, uncounted) for up to the relay's
///   [`with_destination_grace`](crate::Relay::with_destination_grace);
/// - [`declaring_queues`](Self::declaring_queues): the target declares a durable queue named
///   like each topic before its first publish there, bound to the exchange with the topic as
///   routing key when it publishes to one;
/// - [`requiring_queues`](Self::requiring_queues): the relay refuses to start
///   ([`Relay::try_run`](crate::Relay::try_run)) unless those queues (and the exchange) exist.
///
/// Consume on the other side with `idempotency_queue::MessageId` as the key extractor.
pub struct RabbitMqTarget {
    url: String,
    exchange: String,
    declare: Option<FieldTable>,
    required: Vec<String>,
    link: Mutex<Option<Link>>,
}

/// An open connection, its confirm-mode channel, and the topics whose queues it declared.
struct Link {
    _connection: Connection,
    channel: Channel,
    declared: HashSet<String>,
}

impl RabbitMqTarget {
    /// A target publishing to `exchange` (`""`: the default exchange, the topic names the queue)
    /// on the broker at `url`; it connects at the first delivery.
    pub fn new(url: impl Into<String>, exchange: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            exchange: exchange.into(),
            declare: None,
            required: Vec::new(),
            link: Mutex::new(None),
        }
    }

    /// Declares, before the first publish to each topic, a durable queue named like the topic
    /// with `arguments` (`x-queue-type`, `x-dead-letter-exchange`…: declare it exactly as the
    /// consumer does, or the broker refuses the second declaration), bound to the exchange with
    /// the topic as routing key when the target publishes to a named exchange (which must
    /// exist: [`Relay::try_run`](crate::Relay::try_run) checks it). Declaring is idempotent;
    /// a queue deleted later is declared again at its next unroutable message.
    pub fn declaring_queues(mut self, arguments: FieldTable) -> Self {
        self.declare = Some(arguments);
        self
    }

    /// Requires the queues `queues` (and the exchange, when it is named) to exist when the relay
    /// starts through [`Relay::try_run`](crate::Relay::try_run), which otherwise fails with a
    /// [`DestinationError`] naming each one missing.
    pub fn requiring_queues<Q: Into<String>>(
        mut self,
        queues: impl IntoIterator<Item = Q>,
    ) -> Self {
        self.required = queues.into_iter().map(Into::into).collect();
        self
    }

    async fn open(&self) -> Result<Link, lapin::Error> {
        let connection = Connection::connect(&self.url, ConnectionProperties::default()).await?;
        let channel = connection.create_channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        Ok(Link {
            _connection: connection,
            channel,
            declared: HashSet::new(),
        })
    }

    /// Declares (and binds) the queue of every topic of `batch` this link has not declared yet.
    async fn declare_topics(
        &self,
        link: &mut Link,
        batch: &[Claimed],
        arguments: &FieldTable,
    ) -> Result<(), lapin::Error> {
        for claimed in batch {
            let topic = claimed.message.topic.as_str();
            if link.declared.contains(topic) {
                continue;
            }
            link.channel
                .queue_declare(
                    topic.into(),
                    QueueDeclareOptions::durable(),
                    arguments.clone(),
                )
                .await?;
            if !self.exchange.is_empty() {
                link.channel
                    .queue_bind(
                        topic.into(),
                        self.exchange.as_str().into(),
                        topic.into(),
                        QueueBindOptions::default(),
                        FieldTable::default(),
                    )
                    .await?;
            }
            link.declared.insert(topic.to_owned());
        }
        Ok(())
    }

    /// Whether `exchange` or `queue` (exactly one given) exists: a passive declaration on a
    /// channel of its own, since the broker closes the channel of one that fails.
    async fn exists(
        connection: &Connection,
        exchange: Option<&str>,
        queue: Option<&str>,
    ) -> Result<bool, lapin::Error> {
        let channel = connection.create_channel().await?;
        let answer = match (exchange, queue) {
            (Some(exchange), _) => {
                channel
                    .exchange_declare(
                        exchange.into(),
                        ExchangeKind::Direct,
                        ExchangeDeclareOptions {
                            passive: true,
                            ..ExchangeDeclareOptions::default()
                        },
                        FieldTable::default(),
                    )
                    .await
            }
            (None, Some(queue)) => channel
                .queue_declare(
                    queue.into(),
                    QueueDeclareOptions {
                        passive: true,
                        ..QueueDeclareOptions::default()
                    },
                    FieldTable::default(),
                )
                .await
                .map(drop),
            (None, None) => Ok(()),
        };
        match answer {
            Ok(()) => {
                let _ = channel.close(200, "checked".into()).await;
                Ok(true)
            }
            Err(error) if is_not_found(&error) => Ok(false),
            Err(error) => Err(error),
        }
    }
}

/// Whether the broker answered `NOT_FOUND` (404) to a passive declaration.
fn is_not_found(error: &lapin::Error) -> bool {
    error.to_string().contains("NOT_FOUND")
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
    async fn prepare(&self) -> Result<(), DestinationError> {
        if self.exchange.is_empty() && self.required.is_empty() {
            return Ok(());
        }
        let connection = Connection::connect(&self.url, ConnectionProperties::default())
            .await
            .map_err(|error| DestinationError(format!("RabbitMQ unreachable: {error}")))?;
        let failed = |error: lapin::Error| DestinationError(format!("RabbitMQ: {error}"));
        let mut missing = Vec::new();
        if !self.exchange.is_empty()
            && !Self::exists(&connection, Some(&self.exchange), None)
                .await
                .map_err(failed)?
        {
            missing.push(format!("exchange {:?}", self.exchange));
        }
        for queue in &self.required {
            if !Self::exists(&connection, None, Some(queue))
                .await
                .map_err(failed)?
            {
                missing.push(format!("queue {queue:?}"));
            }
        }
        let _ = connection.close(200, "checked".into()).await;
        if missing.is_empty() {
            return Ok(());
        }
        Err(DestinationError(format!(
            "{} missing on the RabbitMQ broker: start the consumer that declares it, or \
             declare it yourself (RabbitMqTarget::declaring_queues)",
            missing.join(", ")
        )))
    }

    async fn deliver(&self, batch: &[Claimed]) -> Vec<Result<(), DeliveryError>> {
        let mut guard = self.link.lock().await;
        if guard
            .as_ref()
            .is_some_and(|link| !link.channel.status().connected())
        {
            *guard = None;
        }
        let link = match &mut *guard {
            Some(link) => link,
            None => match self.open().await {
                Ok(opened) => guard.insert(opened),
                Err(error) => return vec![Err(unreachable(&error)); batch.len()],
            },
        };
        if let Some(arguments) = &self.declare
            && let Err(error) = self.declare_topics(link, batch, arguments).await
        {
            tracing::warn!(%error, exchange = %self.exchange, "declaring the outbox's queues failed");
            *guard = None;
            return vec![Err(unreachable(&error)); batch.len()];
        }
        let channel = link.channel.clone();
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
        for (claimed, confirm) in batch.iter().zip(confirms) {
            let result = match confirm {
                Err(error) => Err(unreachable(&error)),
                Ok(confirm) => match confirm.await {
                    Ok(Confirmation::Ack(None)) => Ok(()),
                    Ok(Confirmation::Ack(Some(_))) => Err(DeliveryError::NoDestination(
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
            if matches!(result, Err(DeliveryError::NoDestination(_))) {
                // Declared once, deleted since: declare it again next time.
                link.declared.remove(&claimed.message.topic);
            }
            results.push(result);
        }
        if broken {
            *guard = None;
        }
        results
    }
}
