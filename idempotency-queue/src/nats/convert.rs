//! JetStream message → [`Message`].

use async_nats::jetstream;

use crate::Message;

/// The broker-neutral view of a JetStream message. The payload is shared, not copied.
pub fn message(delivered: &jetstream::Message) -> Message {
    let inner = &delivered.message;
    let mut message = Message::new(inner.payload.clone()).with_subject(inner.subject.as_str());
    if let Some(headers) = &inner.headers {
        for (name, values) in headers.iter() {
            let name: &str = name.as_ref();
            for value in values {
                if name.eq_ignore_ascii_case("Nats-Msg-Id") {
                    message = message.with_message_id(value.as_str());
                }
                message = message.with_header(name, value.as_str());
            }
        }
    }
    let count = delivered
        .info()
        .ok()
        .and_then(|info| u64::try_from(info.delivered).ok());
    message.with_delivery(count.is_some_and(|count| count > 1), count)
}
