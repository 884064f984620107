//! Where rejected messages go: a dead-letter subject stored by a JetStream stream, published to
//! with the reason, before the original is terminated.

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, AckKind, stream};

use crate::RejectReason;
use crate::dead_letter::{self as headers, dropped, failed, stored};

/// How long a rejected message whose dead letter could not be stored waits before JetStream
/// redelivers it (and it is rejected, and dead-lettered, again).
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// Where a consumer ([`serve`](super::serve)) sends the messages it rejects (no business key, or
/// a key reused with another payload). Every consumer is given one.
///
/// [`declare`](Self::declare), [`to_subject`](Self::to_subject) or
/// [`to_subject_suffix`](Self::to_subject_suffix): the rejected message is published through
/// JetStream to the dead-letter subject, payload and headers unchanged, with headers added: the
/// reason ([`REASON_HEADER`](crate::dead_letter::REASON_HEADER): `no business key: …` or
/// `payload mismatch`), the consumer's namespace, the original subject, stream, stream sequence
/// and delivery count. Only once a stream has acknowledged storing the copy is the original
/// terminated (`+TERM`); if none did (no stream takes the subject, a timeout), the original is
/// `-NAK`ed with [`DEFAULT_RETRY_AFTER`], never terminated. A JetStream publish, not a core
/// one: a core publish nobody listens to is a silent drop.
///
/// The `+TERM` carries no reason (NATS 2.9 has none; the reason is in the dead letter). The
/// copy's `Nats-Msg-Id` is `dead-letter:<stream>:<sequence>`, so the dead-letter stream drops
/// a second copy of the same message (its `+TERM` lost, then redelivered) within its duplicate
/// window; the original id is kept in
/// [`ORIGINAL_MSG_ID_HEADER`](crate::dead_letter::ORIGINAL_MSG_ID_HEADER). Other `Nats-`
/// headers (expectations meant for the original stream) are left out of the copy.
///
/// Pick a dead-letter subject outside the source stream's subjects: in the source stream, it
/// would be delivered to the consumer again.
#[derive(Clone, Debug)]
pub struct DeadLetters {
    target: Target,
}

#[derive(Clone, Debug)]
enum Target {
    Stream {
        // Boxed: a context is large, and `DropAndLog` is nothing.
        js: Box<jetstream::Context>,
        subject: Subject,
        retry_after: Duration,
    },
    DropAndLog,
}

#[derive(Clone, Debug)]
enum Subject {
    Fixed(String),
    Suffix(String),
}

impl DeadLetters {
    /// Publishes rejected messages to `subject`, which a stream must take (else they are
    /// `-NAK`ed and redelivered).
    pub fn to_subject(js: jetstream::Context, subject: impl Into<String>) -> Self {
        Self::new(js, Subject::Fixed(subject.into()))
    }

    /// Publishes a rejected message to its own subject followed by `suffix` (`".dead"`:
    /// `coupon.grant` → `coupon.grant.dead`), which a stream must take.
    pub fn to_subject_suffix(js: jetstream::Context, suffix: impl Into<String>) -> Self {
        Self::new(js, Subject::Suffix(suffix.into()))
    }

    /// Creates the stream `stream_name` taking `subject`, unless a stream of that name exists
    /// (then it is used as it is), and publishes rejected messages to `subject`.
    pub async fn declare(
        js: jetstream::Context,
        stream_name: &str,
        subject: &str,
    ) -> Result<Self, async_nats::Error> {
        js.get_or_create_stream(stream::Config {
            name: stream_name.to_owned(),
            subjects: vec![subject.to_owned()],
            ..Default::default()
        })
        .await?;
        Ok(Self::to_subject(js, subject))
    }

    /// The escape hatch: rejected messages are terminated (`+TERM`) without a dead letter,
    /// counted ([`DROPPED_REJECTS`](crate::dead_letter::DROPPED_REJECTS)) and logged at WARN.
    /// They are gone (an advisory, `$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED`, says which).
    pub fn drop_and_log() -> Self {
        Self {
            target: Target::DropAndLog,
        }
    }

    /// Redelivers a message whose dead letter could not be stored after `delay` (default
    /// [`DEFAULT_RETRY_AFTER`]).
    #[must_use]
    pub fn with_retry_after(mut self, delay: Duration) -> Self {
        if let Target::Stream { retry_after, .. } = &mut self.target {
            *retry_after = delay;
        }
        self
    }

    fn new(js: jetstream::Context, subject: Subject) -> Self {
        Self {
            target: Target::Stream {
                js: Box::new(js),
                subject,
                retry_after: DEFAULT_RETRY_AFTER,
            },
        }
    }

    /// Settles a message the consumer rejected: dead-letters it and terminates it, or
    /// `-NAK`s it. `Err` only if the settle itself failed.
    pub(crate) async fn settle(
        &self,
        delivered: &jetstream::Message,
        reason: &RejectReason,
        namespace: &str,
    ) -> Result<(), async_nats::Error> {
        let Target::Stream {
            js,
            subject,
            retry_after,
        } = &self.target
        else {
            dropped(namespace, reason);
            return delivered.ack_with(AckKind::Term).await;
        };
        let subject = match subject {
            Subject::Fixed(subject) => subject.clone(),
            Subject::Suffix(suffix) => format!("{}{suffix}", delivered.message.subject),
        };
        let copy = dead_letter_headers(delivered, reason, namespace);
        match publish(js, &subject, copy, delivered).await {
            Ok(()) => {
                stored(namespace, reason, &subject);
                delivered.ack_with(AckKind::Term).await
            }
            Err(error) => {
                failed(namespace, reason, &error);
                delivered.ack_with(AckKind::Nak(Some(*retry_after))).await
            }
        }
    }
}

/// Publishes the copy and waits for a stream to acknowledge it.
async fn publish(
    js: &jetstream::Context,
    subject: &str,
    headers: HeaderMap,
    delivered: &jetstream::Message,
) -> Result<(), async_nats::Error> {
    let payload = delivered.message.payload.clone();
    js.publish_with_headers(subject.to_owned(), headers, payload)
        .await?
        .await?;
    Ok(())
}

/// The original headers (less `Nats-` ones) with the dead-letter headers added.
fn dead_letter_headers(
    delivered: &jetstream::Message,
    reason: &RejectReason,
    namespace: &str,
) -> HeaderMap {
    let mut copy = HeaderMap::new();
    if let Some(original) = &delivered.message.headers {
        for (name, values) in original.iter() {
            let text: &str = name.as_ref();
            let nats_header = text
                .get(..5)
                .is_some_and(|p| p.eq_ignore_ascii_case("nats-"));
            if text.eq_ignore_ascii_case(async_nats::header::NATS_MESSAGE_ID.as_ref()) {
                for value in values {
                    copy.append(headers::ORIGINAL_MSG_ID_HEADER, value.clone());
                }
            } else if !nats_header {
                for value in values {
                    copy.append(name.clone(), value.clone());
                }
            }
        }
    }
    copy.insert(headers::REASON_HEADER, reason.to_string());
    copy.insert(headers::NAMESPACE_HEADER, namespace);
    copy.insert(
        headers::ORIGINAL_SUBJECT_HEADER,
        delivered.message.subject.as_str(),
    );
    if let Ok(info) = delivered.info() {
        copy.insert(headers::ORIGINAL_STREAM_HEADER, info.stream);
        copy.insert(
            headers::STREAM_SEQUENCE_HEADER,
            info.stream_sequence.to_string(),
        );
        copy.insert(headers::DELIVERY_COUNT_HEADER, info.delivered.to_string());
        copy.insert(
            async_nats::header::NATS_MESSAGE_ID,
            format!("dead-letter:{}:{}", info.stream, info.stream_sequence),
        );
    }
    copy
}
