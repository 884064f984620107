//! Finishing work whose awaiting future was dropped: a handler whose client went away runs to
//! its end (and its record completed or released) in a task of its own.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use idempotency_core::background::Tracker;
use tracing::Instrument;

/// Where unfinished work goes on: the runtime and span it was polled in.
struct Home {
    runtime: Option<tokio::runtime::Handle>,
    span: tracing::Span,
}

impl Home {
    fn current() -> Self {
        Self {
            runtime: tokio::runtime::Handle::try_current().ok(),
            span: tracing::Span::current(),
        }
    }
}

/// Work that finishes in the background if its awaiting future is dropped unfinished.
pub(crate) struct Detachable<F: Future + Send + 'static>
where
    F::Output: Send + 'static,
{
    /// `None` once finished, and while being polled (a panicking poll drops it, never detaches
    /// it).
    work: Option<Pin<Box<F>>>,
    /// Captured when the work first waits: work done at its first poll (a handler that answers
    /// at once, a store that answers at once) is never detached, and pays for neither.
    home: Option<Home>,
    /// The layer's detached works (this one counted there while it runs detached).
    detached: Arc<Detached>,
}

/// The works of one layer that run detached now, and the tracker they run under (the
/// engine's: [`Tracker::shutdown`] waits for them).
#[derive(Debug, Default)]
pub(crate) struct Detached {
    running: AtomicUsize,
    pub(crate) tracker: Tracker,
}

impl Detached {
    /// No work detached yet; detached work runs under `tracker`.
    pub(crate) fn new(tracker: Tracker) -> Self {
        Self {
            running: AtomicUsize::new(0),
            tracker,
        }
    }

    /// How many works run detached now.
    pub(crate) fn running(&self) -> usize {
        self.running.load(Ordering::Relaxed)
    }
}

/// One detached work counted while it runs.
struct Counted(Arc<Detached>);

impl Counted {
    fn new(detached: Arc<Detached>) -> Self {
        detached.running.fetch_add(1, Ordering::Relaxed);
        Self(detached)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::Relaxed);
    }
}

impl<F: Future + Send + 'static> Future for Detachable<F>
where
    F::Output: Send + 'static,
{
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let Some(mut work) = self.work.take() else {
            panic!("Detachable polled after completion");
        };
        match work.as_mut().poll(cx) {
            Poll::Ready(output) => Poll::Ready(output),
            Poll::Pending => {
                self.work = Some(work);
                if self.home.is_none() {
                    self.home = Some(Home::current());
                }
                Poll::Pending
            }
        }
    }
}

impl<F: Future + Send + 'static> Drop for Detachable<F>
where
    F::Output: Send + 'static,
{
    fn drop(&mut self) {
        let Some(work) = self.work.take() else {
            return;
        };
        let Home { runtime, span } = self.home.take().unwrap_or_else(Home::current);
        tracing::debug!(
            parent: &span,
            "request dropped while its handler runs; finishing it in the background"
        );
        let counted = Counted::new(Arc::clone(&self.detached));
        let work = async move {
            let output = work.await;
            drop(counted);
            output
        }
        .instrument(span);
        let tracker = &self.detached.tracker;
        // Outside a runtime, the tracker's known runtime takes it (or logs and counts its loss).
        match runtime {
            Some(runtime) => drop(tracker.spawn_on(&runtime, work)),
            None => drop(tracker.spawn(work)),
        }
    }
}

impl<F: Future + Send + 'static> Detachable<F>
where
    F::Output: Send + 'static,
{
    /// `work`, to be awaited in place, and moved to a task of its own if dropped unfinished.
    ///
    /// The work is boxed so that it can be moved while running. Detached, it is counted in
    /// `detached` until it ends.
    pub(crate) fn new(work: F, detached: Arc<Detached>) -> Self {
        Self {
            work: Some(Box::pin(work)),
            home: None,
            detached,
        }
    }
}
