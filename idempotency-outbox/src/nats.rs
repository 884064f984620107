//! NATS JetStream as a relay target (async-nats), with `Nats-Msg-Id` publish dedup.

use std::sync::atomic::{AtomicBool, Ordering};

use async_nats::HeaderMap;
use async_nats::jetstream::context::{GetStreamByNameErrorKind, PublishErrorKind};
use async_nats::jetstream::{self, stream};

use crate::table::Claimed;

use crate::target::{DeliveryError, DestinationError, Target};

/// The header that carries the business key (`Nats-Msg-Id` carries the message id).
pub const BUSINESS_KEY_HEADER: &str = "business-key";

/// Publishes each message to the subject named by its topic through JetStream, with the
/// message id as `Nats-Msg-Id`: the stream itself drops a copy published again within its
/// duplicate window (the relay's first retry after a crash), and the consumer's dedup catches
/// the rest. A message counts as delivered when the stream acked it (a duplicate ack too); no
/// stream for the subject (JetStream's "no responders") has
/// [no destination](DeliveryError::NoDestination): deferred uncounted while younger than the
/// relay's grace; a timeout or a lost connection makes it unreachable (async-nats reconnects
/// on its own).
///
/// Who creates the stream is yours to choose, so the relay may start before the consumer:
/// - by default the consumer's side does, and messages published before wait in the outbox
///   for up to the relay's [`with_destination_grace`](crate::Relay::with_destination_grace);
/// - [`creating_stream`](Self::creating_stream): the target creates the stream (if no stream
///   of that name exists) before its first publish;
/// - [`requiring_subjects`](Self::requiring_subjects): the relay refuses to start
///   ([`Relay::try_run`](crate::Relay::try_run)) unless a stream captures each subject.
///
/// Consume on the other side with `idempotency_queue::MessageId` as the key extractor.
pub struct JetStreamTarget {
    js: jetstream::Context,
    create: Option<stream::Config>,
    created: AtomicBool,
    required: Vec<String>,
}

impl JetStreamTarget {
    /// A target publishing through `js`.
    pub fn new(js: jetstream::Context) -> Self {
        Self {
            js,
            create: None,
            created: AtomicBool::new(false),
            required: Vec::new(),
        }
    }

    /// Creates the stream `config` (its subjects must capture the topics) before the first
    /// publish, unless a stream of that name exists (an existing stream is left as it is), and
    /// again after a publish found no stream.
    pub fn creating_stream(mut self, config: stream::Config) -> Self {
        self.create = Some(config);
        self
    }

    /// Requires a stream capturing each of `subjects` when the relay starts through
    /// [`Relay::try_run`](crate::Relay::try_run), which otherwise fails with a
    /// [`DestinationError`] naming each subject without one.
    pub fn requiring_subjects<S: Into<String>>(
        mut self,
        subjects: impl IntoIterator<Item = S>,
    ) -> Self {
        self.required = subjects.into_iter().map(Into::into).collect();
        self
    }

    /// Creates the configured stream unless done already.
    async fn ensure_stream(&self) -> Result<(), DestinationError> {
        let Some(config) = &self.create else {
            return Ok(());
        };
        if self.created.load(Ordering::Acquire) {
            return Ok(());
        }
        self.js
            .get_or_create_stream(config.clone())
            .await
            .map_err(|error| {
                DestinationError(format!("creating stream {:?}: {error}", config.name))
            })?;
        self.created.store(true, Ordering::Release);
        Ok(())
    }
}

fn failure(kind: PublishErrorKind, error: String) -> DeliveryError {
    match kind {
        PublishErrorKind::TimedOut | PublishErrorKind::BrokenPipe | PublishErrorKind::Other => {
            DeliveryError::Unreachable(error)
        }
        PublishErrorKind::StreamNotFound => DeliveryError::NoDestination(error),
        _ => DeliveryError::Refused(error),
    }
}

impl Target for JetStreamTarget {
    async fn prepare(&self) -> Result<(), DestinationError> {
        self.ensure_stream().await?;
        let mut missing = Vec::new();
        for subject in &self.required {
            match self.js.stream_by_subject(subject.as_str()).await {
                Ok(_) => {}
                Err(error) if error.kind() == GetStreamByNameErrorKind::NotFound => {
                    missing.push(format!("{subject:?}"));
                }
                Err(error) => {
                    return Err(DestinationError(format!(
                        "NATS JetStream, looking up the stream of {subject:?}: {error}"
                    )));
                }
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        Err(DestinationError(format!(
            "no JetStream stream captures the subject(s) {}: create the stream first, or let \
             the target create it (JetStreamTarget::creating_stream)",
            missing.join(", ")
        )))
    }

    async fn deliver(&self, batch: &[Claimed]) -> Vec<Result<(), DeliveryError>> {
        if let Err(error) = self.ensure_stream().await {
            tracing::warn!(%error, "creating the outbox's stream failed");
            return vec![Err(DeliveryError::Unreachable(error.0)); batch.len()];
        }
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
        if results
            .iter()
            .any(|result| matches!(result, Err(DeliveryError::NoDestination(_))))
        {
            // Created once, deleted since: create it again next time.
            self.created.store(false, Ordering::Release);
        }
        results
    }
}
