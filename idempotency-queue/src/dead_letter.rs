//! What a dead letter carries, whatever the broker: its header names and its counters.
//!
//! A rejected delivery (no business key, or a key reused with another payload) is never run and
//! never redelivered; without a dead-letter destination it would vanish with only a log line.
//! The broker adapters (`rabbitmq::DeadLetters`, `nats::DeadLetters`) republish it, payload and
//! headers unchanged, with the headers below added, and settle the original only once the broker
//! has confirmed the copy. If the copy cannot be stored, the original is requeued: never
//! dropped.

#[cfg(any(feature = "rabbitmq", feature = "nats"))]
use crate::RejectReason;

/// Why the message was rejected: `no business key: …` or `payload mismatch`
/// ([`crate::RejectReason`]'s `Display`).
pub const REASON_HEADER: &str = "x-idempotency-reject-reason";
/// The namespace of the consumer that rejected it.
pub const NAMESPACE_HEADER: &str = "x-idempotency-namespace";
/// RabbitMQ: the queue the message was consumed from.
pub const ORIGINAL_QUEUE_HEADER: &str = "x-idempotency-original-queue";
/// RabbitMQ: the exchange the message was published to (empty for the default exchange).
pub const ORIGINAL_EXCHANGE_HEADER: &str = "x-idempotency-original-exchange";
/// RabbitMQ: the routing key it was published with.
pub const ORIGINAL_ROUTING_KEY_HEADER: &str = "x-idempotency-original-routing-key";
/// RabbitMQ: the delivery tag it was rejected under (per channel: for correlating logs).
pub const DELIVERY_TAG_HEADER: &str = "x-idempotency-delivery-tag";
/// RabbitMQ: whether the broker flagged the rejected delivery as a redelivery.
pub const REDELIVERED_HEADER: &str = "x-idempotency-redelivered";
/// NATS: the subject the message was published on.
pub const ORIGINAL_SUBJECT_HEADER: &str = "x-idempotency-original-subject";
/// NATS: the stream it was stored in.
pub const ORIGINAL_STREAM_HEADER: &str = "x-idempotency-original-stream";
/// NATS: its sequence number in that stream.
pub const STREAM_SEQUENCE_HEADER: &str = "x-idempotency-stream-sequence";
/// NATS: how many times it was delivered (1 for the first).
pub const DELIVERY_COUNT_HEADER: &str = "x-idempotency-delivery-count";
/// NATS: the original `Nats-Msg-Id` (the copy gets an id of its own, see `nats::DeadLetters`).
pub const ORIGINAL_MSG_ID_HEADER: &str = "x-idempotency-original-msg-id";

/// Counter of rejected messages stored as dead letters (the original then settled), labelled
/// `namespace` and `reason` ([`RejectReason::label`](crate::RejectReason::label)).
pub const DEAD_LETTERS: &str = "idempotency_queue_dead_letters_total";
/// Counter of rejected messages whose dead letter could not be stored (the original requeued),
/// labelled `namespace` and `reason`.
pub const DEAD_LETTER_FAILURES: &str = "idempotency_queue_dead_letter_failures_total";
/// Counter of rejected messages settled without a dead letter (`DeadLetters::drop_and_log`),
/// labelled `namespace` and `reason`.
pub const DROPPED_REJECTS: &str = "idempotency_queue_dropped_rejects_total";

/// Counts and logs a dead letter stored for `reason` (never the payload).
#[cfg(any(feature = "rabbitmq", feature = "nats"))]
pub(crate) fn stored(namespace: &str, reason: &RejectReason, destination: &str) {
    metrics::counter!(DEAD_LETTERS, "namespace" => namespace.to_owned(), "reason" => reason.label())
        .increment(1);
    tracing::warn!(namespace, %reason, destination, "rejected message dead-lettered");
}

/// Counts and logs a dead letter that could not be stored; the original is requeued.
#[cfg(any(feature = "rabbitmq", feature = "nats"))]
pub(crate) fn failed(namespace: &str, reason: &RejectReason, error: &dyn std::fmt::Display) {
    metrics::counter!(DEAD_LETTER_FAILURES, "namespace" => namespace.to_owned(), "reason" => reason.label())
        .increment(1);
    tracing::warn!(namespace, %reason, %error, "could not dead-letter a rejected message; requeued");
}

/// Counts and logs a rejected message settled without a dead letter.
#[cfg(any(feature = "rabbitmq", feature = "nats"))]
pub(crate) fn dropped(namespace: &str, reason: &RejectReason) {
    metrics::counter!(DROPPED_REJECTS, "namespace" => namespace.to_owned(), "reason" => reason.label())
        .increment(1);
    tracing::warn!(
        namespace,
        %reason,
        "rejected message dropped without a dead letter (DeadLetters::drop_and_log)"
    );
}
