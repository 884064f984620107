//! A pull consumer's messages, pulled once or again after every failure.

use async_nats::jetstream::{self, consumer::PullConsumer};
use futures_util::{Stream, StreamExt, TryStreamExt, stream};
use idempotency_core::Store;

use super::consume::Consuming;
use crate::reconnect::until;
use crate::stop::Stop;
use crate::{Handler, KeyExtractor};

/// The messages of `pull`: the pull starts when the stream is first polled, and its failure to
/// start is the stream's first (and last) item.
pub(super) fn messages(
    pull: &PullConsumer,
) -> impl Stream<Item = Result<jetstream::Message, async_nats::Error>> + Send + '_ {
    stream::once(pull.messages())
        .map_ok(|messages| messages.map_err(async_nats::Error::from))
        .map_err(async_nats::Error::from)
        .try_flatten()
}

/// Consumes `pull`'s messages, and pulls again (after a pause) whenever they fail or end (the
/// client lost the server: `async-nats` reconnects by itself underneath), until `stop`: then
/// the messages in hand finish and are settled.
pub(super) async fn reconnecting<S, K, H>(
    consuming: Consuming<'_, S, K, H>,
    pull: &PullConsumer,
    stop: &Stop,
) where
    S: Store,
    K: KeyExtractor,
    H: Handler,
{
    until("nats", stop, || {
        consuming.consume(messages(pull).take_until(stop.asked()))
    })
    .await;
}
