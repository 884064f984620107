//! Where rejected deliveries go: a dead-letter exchange the consumer publishes to, with the
//! reason, under publisher confirms.

use std::fmt;
use std::time::Duration;

use lapin::message::Delivery;
use lapin::options::{
    BasicNackOptions, BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions,
    QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ExchangeKind};

use crate::dead_letter::{self as headers, dropped, failed, stored};
use crate::{Action, RejectReason};

/// How long a rejected delivery whose dead letter could not be stored waits before it is
/// requeued (and rejected, and dead-lettered, again).
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// Where a consumer ([`serve`](super::serve)) sends the deliveries it rejects (no business key,
/// or a key reused with another payload). Every consumer is given one.
///
/// [`declare`](Self::declare) or [`to_exchange`](Self::to_exchange): the rejected message is
/// published to a dead-letter exchange, payload and properties unchanged, with text headers
/// added: the reason ([`REASON_HEADER`](crate::dead_letter::REASON_HEADER): `no business key: …`
/// or `payload mismatch`), the consumer's namespace, the original queue, exchange and routing
/// key, the delivery tag and the redelivered flag. The publish is `mandatory` and confirmed
/// (a channel of its own in confirm mode); only once the broker confirms it routed the copy is
/// the original acked. If it did not (no such exchange, no queue bound, a nack, a closed
/// channel), the original is requeued after [`DEFAULT_RETRY_AFTER`], never dropped.
///
/// Why publish rather than `basic.reject` onto the queue's own `x-dead-letter-exchange`: the
/// copy carries *why* it was rejected (the broker's `x-death` header only says `rejected`), the
/// consumer knows the copy is stored before it lets the original go, and the source queue needs
/// no arguments (redeclaring an existing queue with an added `x-dead-letter-exchange` fails
/// with `PRECONDITION_FAILED`; a policy would be needed instead).
///
/// If the dead-letter channel closes (a publish to a missing exchange closes it with
/// `NOT_FOUND`), the delivery is requeued at once and the consume loop returns that error:
/// [`serve_reconnecting`](super::serve_reconnecting) opens a new session.
///
/// A rejected message whose ack is lost after its copy was stored is redelivered, rejected and
/// dead-lettered again: a dead-letter queue may hold the same message twice, never none.
#[derive(Clone)]
pub struct DeadLetters {
    target: Target,
}

#[derive(Clone)]
enum Target {
    Exchange {
        channel: Channel,
        exchange: ShortString,
        routing_key: Option<ShortString>,
        retry_after: Duration,
    },
    DropAndLog,
}

impl fmt::Debug for DeadLetters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.target {
            Target::Exchange {
                exchange,
                routing_key,
                retry_after,
                ..
            } => f
                .debug_struct("DeadLetters")
                .field("exchange", exchange)
                .field("routing_key", routing_key)
                .field("retry_after", retry_after)
                .finish_non_exhaustive(),
            Target::DropAndLog => f.write_str("DeadLetters::drop_and_log"),
        }
    }
}

impl DeadLetters {
    /// Publishes rejected deliveries to `exchange`, which must exist and route them to a queue
    /// (else they are requeued), with the original queue's name as routing key (see
    /// [`with_routing_key`](Self::with_routing_key)). Opens a channel of its own on
    /// `connection`, in confirm mode.
    pub async fn to_exchange(
        connection: &Connection,
        exchange: &str,
    ) -> Result<Self, lapin::Error> {
        let channel = connection.create_channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        Ok(Self {
            target: Target::Exchange {
                channel,
                exchange: exchange.into(),
                routing_key: None,
                retry_after: DEFAULT_RETRY_AFTER,
            },
        })
    }

    /// Declares a durable direct exchange and a durable queue, both named `<queue>.dead`, the
    /// queue bound with routing key `queue`, and publishes rejected deliveries of `queue` there
    /// ([`to_exchange`](Self::to_exchange)). Idempotent; `queue` itself is left as it is.
    pub async fn declare(connection: &Connection, queue: &str) -> Result<Self, lapin::Error> {
        let name = dead_letter_name(queue);
        let dead_letters = Self::to_exchange(connection, &name).await?;
        if let Target::Exchange { channel, .. } = &dead_letters.target {
            channel
                .exchange_declare(
                    name.as_str().into(),
                    ExchangeKind::Direct,
                    ExchangeDeclareOptions {
                        durable: true,
                        ..ExchangeDeclareOptions::default()
                    },
                    FieldTable::default(),
                )
                .await?;
            channel
                .queue_declare(
                    name.as_str().into(),
                    QueueDeclareOptions::durable(),
                    FieldTable::default(),
                )
                .await?;
            channel
                .queue_bind(
                    name.as_str().into(),
                    name.as_str().into(),
                    queue.into(),
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await?;
        }
        Ok(dead_letters)
    }

    /// The escape hatch: rejected deliveries are `basic.reject`ed without requeue, counted
    /// ([`DROPPED_REJECTS`](crate::dead_letter::DROPPED_REJECTS)) and logged at WARN. The broker
    /// dead-letters them only if their queue has a dead-letter exchange (argument or policy),
    /// without the reason; otherwise they are gone.
    pub fn drop_and_log() -> Self {
        Self {
            target: Target::DropAndLog,
        }
    }

    /// Publishes with `routing_key` instead of the original queue's name.
    #[must_use]
    pub fn with_routing_key(mut self, key: &str) -> Self {
        if let Target::Exchange { routing_key, .. } = &mut self.target {
            *routing_key = Some(key.into());
        }
        self
    }

    /// Requeues a delivery whose dead letter could not be stored after `delay` (default
    /// [`DEFAULT_RETRY_AFTER`]).
    #[must_use]
    pub fn with_retry_after(mut self, delay: Duration) -> Self {
        if let Target::Exchange { retry_after, .. } = &mut self.target {
            *retry_after = delay;
        }
        self
    }

    /// The channel in confirm mode the dead letters are published on (none for
    /// [`drop_and_log`](Self::drop_and_log)); failed deliveries of a classic queue are
    /// republished on it with their count.
    pub(super) fn confirm_channel(&self) -> Option<&Channel> {
        match &self.target {
            Target::Exchange { channel, .. } => Some(channel),
            Target::DropAndLog => None,
        }
    }

    /// Settles a delivery the consumer rejected (its payload was moved out into `payload`):
    /// dead-letters it and acks it, or requeues it. `Err` when the dead-letter channel is
    /// closed (the delivery is requeued first): the consume loop ends with it.
    pub(crate) async fn settle(
        &self,
        delivery: &Delivery,
        queue: &str,
        payload: &[u8],
        reason: &RejectReason,
        namespace: &str,
    ) -> Result<(), lapin::Error> {
        let Target::Exchange {
            channel,
            exchange,
            routing_key,
            retry_after,
        } = &self.target
        else {
            dropped(namespace, reason);
            return settle_logged(delivery, Action::Reject).await;
        };
        let routing_key = routing_key.clone().unwrap_or_else(|| queue.into());
        let properties = dead_letter_properties(delivery, queue, reason, namespace);
        match publish(channel, exchange, routing_key, payload, properties).await {
            Ok(()) => {
                stored(namespace, reason, exchange.as_str());
                settle_logged(delivery, Action::Ack).await
            }
            Err(Failure::Channel(error)) if !channel.status().connected() => {
                failed(namespace, reason, &error);
                let requeue = BasicNackOptions {
                    requeue: true,
                    multiple: false,
                };
                if let Err(nack) = delivery.acker.nack(requeue).await {
                    tracing::warn!(error = %nack, "could not requeue a delivery; the broker redelivers it when its channel closes");
                }
                Err(error)
            }
            Err(failure) => {
                failed(namespace, reason, &failure);
                settle_logged(
                    delivery,
                    Action::Requeue {
                        delay: *retry_after,
                    },
                )
                .await
            }
        }
    }
}

/// `<queue>.dead`: the exchange and queue [`DeadLetters::declare`] makes for `queue`.
pub fn dead_letter_name(queue: &str) -> String {
    format!("{queue}.dead")
}

/// Why a dead letter (or a counted redelivery) was not stored.
pub(super) enum Failure {
    /// The publish or its confirm failed (the channel closed, perhaps for a missing exchange).
    Channel(lapin::Error),
    /// The broker confirmed the copy but routed it to no queue (returned as `mandatory`).
    Unroutable,
    /// The broker nacked the copy.
    Nacked,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Channel(error) => write!(f, "{error}"),
            Self::Unroutable => f.write_str("no queue is bound to the dead-letter exchange for it"),
            Self::Nacked => f.write_str("the broker nacked the dead letter"),
        }
    }
}

pub(super) async fn publish(
    channel: &Channel,
    exchange: &ShortString,
    routing_key: ShortString,
    payload: &[u8],
    properties: BasicProperties,
) -> Result<(), Failure> {
    let mandatory = BasicPublishOptions {
        mandatory: true,
        immediate: false,
    };
    let confirm = channel
        .basic_publish(
            exchange.clone(),
            routing_key,
            mandatory,
            payload,
            properties,
        )
        .await
        .map_err(Failure::Channel)?;
    match confirm.await.map_err(Failure::Channel)? {
        Confirmation::Ack(None) => Ok(()),
        Confirmation::Ack(Some(_returned)) => Err(Failure::Unroutable),
        // Not requested cannot happen on a channel in confirm mode; not confirmed is not stored.
        Confirmation::Nack(_) | Confirmation::NotRequested => Err(Failure::Nacked),
    }
}

/// The original properties, persistent, with the dead-letter headers added.
fn dead_letter_properties(
    delivery: &Delivery,
    queue: &str,
    reason: &RejectReason,
    namespace: &str,
) -> BasicProperties {
    let mut table = delivery.properties.headers().clone().unwrap_or_default();
    let mut text = |name: &str, value: String| {
        table.insert(name.into(), AMQPValue::LongString(LongString::from(value)));
    };
    text(headers::REASON_HEADER, reason.to_string());
    text(headers::NAMESPACE_HEADER, namespace.to_owned());
    text(headers::ORIGINAL_QUEUE_HEADER, queue.to_owned());
    text(
        headers::ORIGINAL_EXCHANGE_HEADER,
        delivery.exchange.as_str().to_owned(),
    );
    text(
        headers::ORIGINAL_ROUTING_KEY_HEADER,
        delivery.routing_key.as_str().to_owned(),
    );
    text(
        headers::DELIVERY_TAG_HEADER,
        delivery.delivery_tag.to_string(),
    );
    text(
        headers::REDELIVERED_HEADER,
        delivery.redelivered.to_string(),
    );
    const PERSISTENT: u8 = 2;
    delivery
        .properties
        .clone()
        .with_headers(table)
        .with_delivery_mode(PERSISTENT)
}

/// Settles the original; a failure is logged (the broker redelivers it when its channel
/// closes), not returned: the consuming channel's own failure ends the loop by itself.
async fn settle_logged(delivery: &Delivery, action: Action) -> Result<(), lapin::Error> {
    if let Err(error) = super::settle(&delivery.acker, action).await {
        tracing::warn!(%error, ?action, "could not settle a rejected delivery; the broker will redeliver it");
    }
    Ok(())
}
