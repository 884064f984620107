//! The broker-neutral view of a delivered message.

use bytes::Bytes;
use idempotency_core::{Fingerprint, IdempotencyKey, Lease};

/// A delivered message as the consumer sees it, whatever the broker.
///
/// Broker adapters build it from their own delivery type (see the `rabbitmq` and `nats`
/// modules); tests and other brokers build it with [`Message::new`] and the `with_*` methods.
///
/// ```
/// use idempotency_queue::Message;
///
/// let message = Message::new(r#"{"trade_no":"T1"}"#)
///     .with_message_id("m-1")
///     .with_header("Business-Key", "T1");
/// assert_eq!(message.header("business-key"), Some("T1"));
/// assert_eq!(message.message_id(), Some("m-1"));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Message {
    payload: Bytes,
    message_id: Option<String>,
    headers: Vec<(String, String)>,
    subject: String,
    redelivered: bool,
    delivery_count: Option<u64>,
}

impl Message {
    /// A message with this payload and nothing else.
    pub fn new(payload: impl Into<Bytes>) -> Self {
        Self {
            payload: payload.into(),
            ..Self::default()
        }
    }

    /// Sets the broker's message id (AMQP `message-id`, NATS `Nats-Msg-Id`).
    pub fn with_message_id(mut self, id: impl Into<String>) -> Self {
        self.message_id = Some(id.into());
        self
    }

    /// Adds a text header (AMQP header table entry, NATS header).
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets the subject or routing key the message arrived on.
    pub fn with_subject(mut self, subject: impl Into<String>) -> Self {
        self.subject = subject.into();
        self
    }

    /// Records whether the broker flagged the message as redelivered, and how many times it was
    /// delivered (1 for the first delivery) when the broker says.
    pub fn with_delivery(mut self, redelivered: bool, delivery_count: Option<u64>) -> Self {
        self.redelivered = redelivered;
        self.delivery_count = delivery_count;
        self
    }

    /// The payload bytes.
    pub fn payload(&self) -> &Bytes {
        &self.payload
    }

    /// The broker's message id, if the producer set one.
    pub fn message_id(&self) -> Option<&str> {
        self.message_id.as_deref()
    }

    /// The first header named `name` (ASCII case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every value of the header named `name` (ASCII case-insensitive), in order.
    pub fn header_values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// All text headers, in arrival order.
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    /// The subject or routing key.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// Whether the broker flagged this delivery as a redelivery.
    pub fn redelivered(&self) -> bool {
        self.redelivered
    }

    /// How many times the broker delivered the message (1 for the first), when it says.
    pub fn delivery_count(&self) -> Option<u64> {
        self.delivery_count
    }
}

/// What a handler receives: the message, the business key it was claimed under, the message's
/// fingerprint and the lease.
#[derive(Clone, Debug)]
pub struct Job {
    /// The business key (from the message id, a header, a body field …).
    pub key: IdempotencyKey,
    /// The message.
    pub message: Message,
    /// What the consumer fingerprinted the message as (its payload, unless
    /// [`IdempotentConsumer::with_fingerprint`](crate::IdempotentConsumer::with_fingerprint)
    /// says otherwise): a handler keeping its own record of truth stores and compares this one.
    pub fingerprint: Fingerprint,
    /// The claim: its fencing token, attempt number and whether it took over a crashed owner.
    /// `None` only for a guarded handler run without a fast-tier claim: the fast-path store was
    /// down or held the key for another consumer (see
    /// [`Handler::guards_itself`](crate::Handler::guards_itself)),
    /// or the consumer has no fast tier (`two_tier::TwoTier::sql_only`, feature `sql`).
    pub lease: Option<Lease>,
}
