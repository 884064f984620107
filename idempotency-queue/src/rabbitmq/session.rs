//! Consuming across broker outages: one session per connection, opened again while it fails.

use futures_util::future::BoxFuture;
use idempotency_core::Store;

use super::DeadLetters;
use super::consume::consume;
use crate::reconnect::until;
use crate::stop::Stop;
use crate::{Handler, IdempotentConsumer, KeyExtractor};

/// What the `open` of [`serve_reconnecting`](super::serve_reconnecting) hands over: the
/// connection the deliveries come on, the deliveries, and where rejected ones go.
pub struct Session {
    /// The connection, closed at a graceful stop: that sends the last acks and gives the broker
    /// back the deliveries that were prefetched but not started.
    pub connection: lapin::Connection,
    /// The deliveries (`basic_consume` on a channel of `connection`).
    pub deliveries: lapin::Consumer,
    /// Where rejected deliveries go ([`DeadLetters::declare`] on `connection`).
    pub dead_letters: DeadLetters,
}

/// Connects and consumes (`open`), the boxed form the builder keeps.
pub(super) type Open<'a> =
    Box<dyn FnMut() -> BoxFuture<'a, Result<Session, lapin::Error>> + Send + 'a>;

/// Opens a session and consumes it, again and again (after a pause) whenever it fails or ends,
/// until `stop`: then the running session finishes its deliveries in hand and its connection is
/// closed.
pub(super) async fn reconnecting<S, K, H>(
    consumer: &IdempotentConsumer<S, K, H>,
    mut open: Open<'_>,
    concurrency: usize,
    stop: &Stop,
) where
    S: Store,
    K: KeyExtractor,
    H: Handler,
{
    until("rabbitmq", stop, || {
        let opened = open();
        async move {
            let session = tokio::select! {
                opened = opened => opened?,
                () = stop.asked() => return Ok(()),
            };
            let consumed = consume(
                consumer,
                session.deliveries,
                &session.dead_letters,
                concurrency,
                stop,
            )
            .await;
            if stop.requested() {
                session.connection.close(200, "stopping".into()).await?;
            }
            consumed
        }
    })
    .await;
}
