//! Work that goes on after its caller has its answer: an unanswered claim undone, a complete or
//! a release retried, a handler whose client went away finished. A [`Tracker`] owns it: each
//! engine has one ([`Idempotency::tracker`](crate::Idempotency::tracker)), and an application
//! that wants one for all its engines and layers gives them its own
//! ([`Idempotency::with_tracker`](crate::Idempotency::with_tracker)), then waits for it before
//! it exits ([`Tracker::shutdown`]).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use std::time::Duration;
//! use idempotency_core::{Idempotency, MemoryStore, background::Tracker};
//!
//! let tracker = Tracker::new();
//! let engine = Idempotency::new(MemoryStore::new()).with_tracker(tracker.clone());
//! # let _ = engine;
//! // On SIGTERM, once the server stopped accepting: let background work end, bounded.
//! let idle = tracker.shutdown(Duration::from_secs(10)).await;
//! assert!(idle);
//! # }
//! ```

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// Counter of background work that could not run: no tokio runtime was current nor known to
/// its tracker.
pub const BACKGROUND_DROPPED: &str = "idempotency_background_dropped_total";

/// Background work of the engines and layers that share it: counted until it ends, so that
/// [`shutdown`](Self::shutdown) can wait for it. Cheap to clone (one shared count).
#[derive(Clone, Default)]
pub struct Tracker {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    /// The work in flight.
    pending: AtomicUsize,
    /// Woken when the last piece of work ends.
    idle: Notify,
    /// The runtime of the first work spawned from one: where work handed over outside any
    /// runtime (a destructor on a foreign thread) runs.
    runtime: OnceLock<Handle>,
}

impl std::fmt::Debug for Tracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracker")
            .field("pending", &self.pending())
            .finish()
    }
}

/// One piece of counted work; uncounted when dropped (ended, cancelled or panicked).
struct Counted(Arc<Inner>);

impl Counted {
    fn new(inner: &Arc<Inner>) -> Self {
        inner.pending.fetch_add(1, Ordering::AcqRel);
        Self(Arc::clone(inner))
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        if self.0.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Tracker {
    /// A tracker with no work.
    pub fn new() -> Self {
        Self::default()
    }

    /// Spawns `work`, counted until it ends: on the current tokio runtime, else on the runtime
    /// this tracker spawned on before. With neither, nothing runs: the loss is logged (ERROR)
    /// and counted ([`BACKGROUND_DROPPED`]), and `None` is returned.
    pub fn spawn<F>(&self, work: F) -> Option<JoinHandle<F::Output>>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let runtime = match Handle::try_current() {
            Ok(runtime) => runtime,
            Err(_) => match self.inner.runtime.get() {
                Some(runtime) => runtime.clone(),
                None => {
                    tracing::error!(
                        "background work dropped: no tokio runtime is current or known to its tracker"
                    );
                    metrics::counter!(BACKGROUND_DROPPED).increment(1);
                    return None;
                }
            },
        };
        Some(self.spawn_on(&runtime, work))
    }

    /// Spawns `work` on `runtime`, counted until it ends: for work handed over where no runtime
    /// is current (a destructor).
    pub fn spawn_on<F>(&self, runtime: &Handle, work: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let _ = self.inner.runtime.get_or_init(|| runtime.clone());
        let counted = Counted::new(&self.inner);
        runtime.spawn(async move {
            let _counted = counted;
            work.await
        })
    }

    /// How much of its work is running now.
    pub fn pending(&self) -> usize {
        self.inner.pending.load(Ordering::Acquire)
    }

    /// Waits until none of its work is left, at most `within`: `true` if none is left. Call it
    /// on shutdown, once the server stopped taking requests (and waited for the open ones), so
    /// that handlers finishing for clients that left, and the records they store, end before
    /// the process.
    pub async fn shutdown(&self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let idle = self.inner.idle.notified();
            if self.pending() == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                return self.pending() == 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waits_for_spawned_work() {
        let tracker = Tracker::new();
        let (release, hold) = tokio::sync::oneshot::channel::<()>();
        let task = tracker.spawn(async move {
            let _ = hold.await;
        });
        assert!(task.is_some());
        assert_eq!(tracker.pending(), 1);
        assert!(
            !tracker.shutdown(Duration::from_millis(30)).await,
            "still running"
        );
        let _ = release.send(());
        assert!(tracker.shutdown(Duration::from_secs(5)).await);
        assert_eq!(Tracker::new().pending(), 0, "trackers share nothing");
    }

    #[test]
    fn work_handed_over_outside_a_runtime_runs_on_the_known_one() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let tracker = Tracker::new();
        assert!(tracker.spawn(async {}).is_none(), "no runtime known yet");
        runtime.block_on(async {
            tracker.spawn(async {}).unwrap().await.unwrap();
        });
        // A destructor on a thread of its own: the work still runs, on the known runtime.
        let (done, ran) = tokio::sync::oneshot::channel();
        let handed = tracker.clone();
        std::thread::spawn(move || {
            handed.spawn(async move {
                let _ = done.send(());
            })
        })
        .join()
        .unwrap()
        .expect("spawned on the known runtime");
        runtime.block_on(async {
            ran.await.unwrap();
            assert!(tracker.shutdown(Duration::from_secs(5)).await);
        });
    }
}
