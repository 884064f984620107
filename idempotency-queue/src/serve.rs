//! What the brokers' `Serve` builders share: the future they turn into, their default
//! concurrency, and the options every broker has.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::future::BoxFuture;

use crate::stop::{Stop, with_shutdown};

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

/// The options of a `Serve` builder that every broker has: how many deliveries run at a time,
/// and the signal of a graceful stop.
pub(crate) struct Options<'a> {
    pub(crate) concurrency: usize,
    pub(crate) shutdown: Option<BoxFuture<'a, ()>>,
}

impl<'a> Options<'a> {
    /// [`DEFAULT_CONCURRENCY`], no graceful stop.
    pub(crate) fn new() -> Self {
        Self {
            concurrency: DEFAULT_CONCURRENCY,
            shutdown: None,
        }
    }

    /// Up to `n` at a time, at least one.
    pub(crate) fn set_concurrency(&mut self, n: usize) {
        self.concurrency = n.max(1);
    }

    /// Stops gracefully when `signal` completes.
    pub(crate) fn set_shutdown(&mut self, signal: impl Future<Output = ()> + Send + 'a) {
        self.shutdown = Some(Box::pin(signal));
    }

    /// The running consumer: `consume` with the concurrency and a [`Stop`] the shutdown signal
    /// turns on.
    pub(crate) fn serve<E: 'a, Fut>(
        self,
        consume: impl FnOnce(usize, Stop) -> Fut + Send + 'a,
    ) -> ServeFuture<'a, E>
    where
        Fut: Future<Output = Result<(), E>> + Send + 'a,
    {
        let Self {
            concurrency,
            shutdown,
        } = self;
        ServeFuture::new(with_shutdown(shutdown, move |stop| {
            consume(concurrency, stop)
        }))
    }
}
