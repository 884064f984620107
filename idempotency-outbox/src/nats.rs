//! NATS JetStream as a relay target (async-nats), with `Nats-Msg-Id` publish dedup.

use async_nats::HeaderMap;
use async_nats::jetstream::{self, context::PublishErrorKind};

use idempotency_core::sql::outbox::Claimed;

use crate::target::{DeliveryError, Target};

/// The header that carries the business key (`Nats-Msg-Id` carries the message id).
pub const BUSINESS_KEY_HEADER: &str = "business-key";

/// Publishes each message to the subject named by its topic through JetStream, with the
/// message id as `Nats-Msg-Id`: the stream itself drops a copy published again within its
/// duplicate window (the relay's first retry after a crash), and the consumer's dedup catches
/// the rest. A message counts as delivered when the stream acked it (a duplicate ack too); no
/// stream for the subject refuses it; a timeout or a lost connection makes it unreachable
/// (async-nats reconnects on its own).
///
/// Consume on the other side with `idempotency_queue::MessageId` as the key extractor.
pub struct JetStreamTarget {
    js: jetstream::Context,
}

impl JetStreamTarget {
    /// A target publishing through `js`.
    pub fn new(js: jetstream::Context) -> Self {
        Self { js }
    }
}

fn failure(kind: PublishErrorKind, error: String) -> DeliveryError {
    match kind {
        PublishErrorKind::TimedOut | PublishErrorKind::BrokenPipe | PublishErrorKind::Other => {
            DeliveryError::Unreachable(error)
        }
        _ => DeliveryError::Refused(error),
    }
}

impl Target for JetStreamTarget {
    async fn deliver(&self, batch: &[Claimed]) -> Vec<Result<(), DeliveryError>> {
        // Publish the whole batch, then wait for the acks.
        let mut acks = Vec::with_capacity(batch.len());
        for claimed in batch {
            let mut headers = HeaderMap::new();
            headers.insert(
                async_nats::header::NATS_MESSAGE_ID,
                claimed.message.id.as_str(),
            );
            headers.insert(BUSINESS_KEY_HEADER, claimed.message.key.as_str());
            let payload = bytes::Bytes::copy_from_slice(&claimed.message.payload);
            acks.push(
                self.js
                    .publish_with_headers(claimed.message.topic.clone(), headers, payload)
                    .await,
            );
        }
        let mut results = Vec::with_capacity(batch.len());
        for ack in acks {
            let result = match ack {
                Err(error) => Err(failure(error.kind(), error.to_string())),
                Ok(ack) => match ack.await {
                    Ok(_) => Ok(()),
                    Err(error) => Err(failure(error.kind(), error.to_string())),
                },
            };
            results.push(result);
        }
        results
    }
}
