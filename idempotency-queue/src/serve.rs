//! What the brokers' `Serve` builders share: the future they turn into and their default
//! concurrency.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::future::BoxFuture;

/// How many deliveries a consumer handles at a time unless told otherwise (`concurrency`).
pub const DEFAULT_CONCURRENCY: usize = 16;

/// A running consumer: what `rabbitmq::Serve` and `nats::Serve` become when awaited. It
/// resolves when consuming ends (the builders say when), and is `Send`, so it can be spawned.
#[must_use = "futures do nothing unless awaited or polled"]
pub struct ServeFuture<'a, E>(BoxFuture<'a, Result<(), E>>);

impl<'a, E> ServeFuture<'a, E> {
    pub(crate) fn new(running: impl Future<Output = Result<(), E>> + Send + 'a) -> Self {
        Self(Box::pin(running))
    }
}

impl<E> Future for ServeFuture<'_, E> {
    type Output = Result<(), E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.as_mut().poll(cx)
    }
}

impl<E> fmt::Debug for ServeFuture<'_, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServeFuture").finish_non_exhaustive()
    }
}
