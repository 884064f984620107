//! Where a message's business key comes from.

use idempotency_core::{IdempotencyKey, KeyError};
use serde_json::Value;

use crate::Message;

/// Finds the business key of a message: the key that makes two deliveries "the same".
///
/// Ready-made: [`MessageId`], [`Header`], [`JsonField`]. Any
/// `Fn(&Message) -> Result<IdempotencyKey, KeyError>` closure is an extractor too.
///
/// ```
/// use idempotency_core::IdempotencyKey;
/// use idempotency_queue::{Header, KeyExtractor, Message};
///
/// let message = Message::new("...").with_header("trade-no", "T42");
/// assert_eq!(Header::new("trade-no").extract(&message).unwrap().as_str(), "T42");
///
/// let by_subject = |m: &Message| IdempotencyKey::parse(m.subject());
/// assert!(by_subject.extract(&message).is_err()); // empty subject
/// ```
pub trait KeyExtractor: Send + Sync + 'static {
    /// The key of `message`, or why there is none.
    fn extract(&self, message: &Message) -> Result<IdempotencyKey, KeyError>;
}

impl<F> KeyExtractor for F
where
    F: Fn(&Message) -> Result<IdempotencyKey, KeyError> + Send + Sync + 'static,
{
    fn extract(&self, message: &Message) -> Result<IdempotencyKey, KeyError> {
        self(message)
    }
}

/// The broker's message id (AMQP `message-id`, NATS `Nats-Msg-Id`).
///
/// Only a business key if the producer derives it from the business event; a broker-generated
/// id differs on every publish and dedups nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct MessageId;

impl KeyExtractor for MessageId {
    fn extract(&self, message: &Message) -> Result<IdempotencyKey, KeyError> {
        IdempotencyKey::parse(message.message_id().ok_or(KeyError::Missing)?)
    }
}

/// A header (AMQP header table entry, NATS header), matched ASCII case-insensitively.
/// Two values are refused ([`KeyError::Multiple`]).
#[derive(Clone, Debug)]
pub struct Header(String);

impl Header {
    /// The header named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self(name.into())
    }
}

impl KeyExtractor for Header {
    fn extract(&self, message: &Message) -> Result<IdempotencyKey, KeyError> {
        let mut values = message.header_values(&self.0);
        let value = values.next().ok_or(KeyError::Missing)?;
        if values.next().is_some() {
            return Err(KeyError::Multiple);
        }
        IdempotencyKey::from_header(value.as_bytes())
    }
}

/// A field of a JSON payload, named by a JSON Pointer such as `/trade_no`. Strings are taken as
/// they are, integers in decimal; anything else is refused.
#[derive(Clone, Debug)]
pub struct JsonField(String);

impl JsonField {
    /// The field at `pointer` (RFC 6901, e.g. `/order/trade_no`).
    pub fn new(pointer: impl Into<String>) -> Self {
        Self(pointer.into())
    }
}

impl KeyExtractor for JsonField {
    fn extract(&self, message: &Message) -> Result<IdempotencyKey, KeyError> {
        let body: Value = serde_json::from_slice(message.payload())
            .map_err(|error| KeyError::Body(error.to_string()))?;
        match body.pointer(&self.0) {
            None | Some(Value::Null) => Err(KeyError::Missing),
            Some(Value::String(text)) => IdempotencyKey::parse(text),
            Some(Value::Number(number)) if number.is_i64() || number.is_u64() => {
                IdempotencyKey::parse(&number.to_string())
            }
            Some(_) => Err(KeyError::Body(format!(
                "{} is neither a string nor an integer",
                self.0
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn message_id() {
        let message = Message::new("").with_message_id("m-1");
        assert_eq!(MessageId.extract(&message).unwrap().as_str(), "m-1");
        assert_eq!(MessageId.extract(&Message::new("")), Err(KeyError::Missing));
        let bad = Message::new("").with_message_id("a b");
        assert_eq!(MessageId.extract(&bad), Err(KeyError::InvalidCharacter(1)));
    }

    #[test]
    fn header() {
        let message = Message::new("").with_header("Trade-No", "\"T1\"");
        assert_eq!(
            Header::new("trade-no").extract(&message).unwrap().as_str(),
            "T1"
        );
        let twice = message.clone().with_header("trade-no", "T2");
        assert_eq!(
            Header::new("trade-no").extract(&twice),
            Err(KeyError::Multiple)
        );
        assert_eq!(
            Header::new("other").extract(&message),
            Err(KeyError::Missing)
        );
    }

    #[test]
    fn json_field() {
        let field = JsonField::new("/order/trade_no");
        let text = Message::new(r#"{"order":{"trade_no":"T9"}}"#);
        assert_eq!(field.extract(&text).unwrap().as_str(), "T9");
        let number = Message::new(r#"{"order":{"trade_no":42}}"#);
        assert_eq!(field.extract(&number).unwrap().as_str(), "42");
        let float = Message::new(r#"{"order":{"trade_no":4.2}}"#);
        assert!(matches!(field.extract(&float), Err(KeyError::Body(_))));
        let absent = Message::new(r#"{"order":{}}"#);
        assert_eq!(field.extract(&absent), Err(KeyError::Missing));
        let garbage = Message::new("not json");
        assert!(matches!(field.extract(&garbage), Err(KeyError::Body(_))));
    }

    #[test]
    fn closures() {
        let by_subject = |m: &Message| IdempotencyKey::parse(m.subject());
        let message = Message::new("").with_subject("orders.7");
        assert_eq!(by_subject.extract(&message).unwrap().as_str(), "orders.7");
    }
}
