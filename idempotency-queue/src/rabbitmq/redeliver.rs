//! Failed deliveries of queues that count nothing: republished with their count.

use std::time::Duration;

use lapin::message::Delivery;
use lapin::types::{AMQPValue, FieldTable, LongString};

use super::dead_letters::publish;
use super::{DELIVERY_COUNT_HEADER, DeadLetters, REDELIVERIES_HEADER};
use crate::Action;

/// Redelivers a failed `delivery` of `queue` after `delay`, counted: a classic queue only flags a
/// redelivery, so a copy is published to the queue (default exchange, under publisher confirms
/// on the dead letters' channel) with [`REDELIVERIES_HEADER`] = `deliveries` so far, and the
/// original is acked once the broker confirmed the copy; if it did not, the original is
/// requeued as before (`basic.nack`). Without a confirm channel
/// ([`DeadLetters::drop_and_log`]) it is requeued too. A crash between the copy and the ack
/// leaves both: the store answers the second as a duplicate.
pub(super) fn redeliver_counted(
    dead_letters: &DeadLetters,
    delivery: Delivery,
    queue: &str,
    payload: bytes::Bytes,
    deliveries: u64,
    delay: Duration,
) {
    let channel = dead_letters.confirm_channel().cloned();
    let queue = queue.to_owned();
    tokio::spawn(async move {
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let copied = match &channel {
            Some(channel) => {
                let original = delivery.properties.headers().clone().unwrap_or_default();
                // The copy is a new message to the broker: its count is ours alone.
                let mut headers: FieldTable = original
                    .inner()
                    .iter()
                    .filter(|(name, _)| !name.as_str().eq_ignore_ascii_case(DELIVERY_COUNT_HEADER))
                    .map(|(name, value)| (name.clone(), value.clone()))
                    .collect::<std::collections::BTreeMap<_, _>>()
                    .into();
                headers.insert(
                    REDELIVERIES_HEADER.into(),
                    AMQPValue::LongString(LongString::from(deliveries.to_string())),
                );
                let properties = delivery.properties.clone().with_headers(headers);
                publish(
                    channel,
                    &"".into(),
                    queue.as_str().into(),
                    &payload,
                    properties,
                )
                .await
                .is_ok()
            }
            None => false,
        };
        let action = if copied {
            Action::Ack
        } else {
            Action::Requeue {
                delay: Duration::ZERO,
            }
        };
        if let Err(error) = super::settle(&delivery.acker, action).await {
            tracing::warn!(%error, "could not settle a failed delivery; the broker redelivers it");
        }
    });
}
