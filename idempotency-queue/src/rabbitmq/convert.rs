//! lapin `Delivery` → [`Message`].

use lapin::message::Delivery;
use lapin::types::AMQPValue;

use crate::Message;

/// The header quorum queues set on redeliveries: how many times the message was delivered
/// before (absent on the first delivery).
pub const DELIVERY_COUNT_HEADER: &str = "x-delivery-count";

/// The header a failed delivery of a classic queue (which counts nothing) is republished with:
/// how many times the message was delivered before. See
/// [`DeadLetters`](super::DeadLetters)' redeliveries.
pub const REDELIVERIES_HEADER: &str = "x-idempotency-deliveries";

/// The broker-neutral view of `delivery`. The payload is moved out (the delivery keeps its
/// acker and properties); text and integer headers are kept, other header types skipped.
pub fn message(delivery: &mut Delivery) -> Message {
    let payload = std::mem::take(&mut delivery.data);
    let mut message = Message::new(payload).with_subject(delivery.routing_key.as_str());
    if let Some(id) = delivery.properties.message_id() {
        message = message.with_message_id(id.as_str());
    }
    let (mut by_broker, mut by_consumer) = (None, None);
    if let Some(headers) = delivery.properties.headers() {
        for (name, value) in headers {
            let Some(text) = text(value) else { continue };
            if name.as_str().eq_ignore_ascii_case(DELIVERY_COUNT_HEADER) {
                by_broker = text.parse::<u64>().ok();
            } else if name.as_str().eq_ignore_ascii_case(REDELIVERIES_HEADER) {
                by_consumer = text.parse::<u64>().ok();
            }
            message = message.with_header(name.as_str(), text);
        }
    }
    // A quorum queue counts; a classic queue does not, but a copy this consumer republished
    // carries its count (a broker redelivery of that copy, after a crash, is not counted).
    let count = match (by_broker, by_consumer) {
        (Some(broker), Some(consumer)) => Some(broker.max(consumer) + 1),
        (Some(previous), None) | (None, Some(previous)) => Some(previous + 1),
        (None, None) if !delivery.redelivered => Some(1),
        (None, None) => None,
    };
    message.with_delivery(delivery.redelivered, count)
}

fn text(value: &AMQPValue) -> Option<String> {
    match value {
        AMQPValue::LongString(text) => String::from_utf8(text.as_bytes().to_vec()).ok(),
        AMQPValue::ShortString(text) => Some(text.as_str().to_owned()),
        AMQPValue::ShortShortInt(n) => Some(n.to_string()),
        AMQPValue::ShortShortUInt(n) => Some(n.to_string()),
        AMQPValue::ShortInt(n) => Some(n.to_string()),
        AMQPValue::ShortUInt(n) => Some(n.to_string()),
        AMQPValue::LongInt(n) => Some(n.to_string()),
        AMQPValue::LongUInt(n) => Some(n.to_string()),
        AMQPValue::LongLongInt(n) => Some(n.to_string()),
        AMQPValue::Timestamp(n) => Some(n.to_string()),
        _ => None,
    }
}
