//! Work that goes on after its caller has its answer: an unanswered claim undone, a complete or
//! a release retried, a handler whose client went away finished. It is counted, so that a
//! process can wait for it before it exits ([`drained`]).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use std::time::Duration;
//! // On SIGTERM, once the server stopped accepting: let background work end, bounded.
//! let idle = idempotency_core::background::drained(Duration::from_secs(10)).await;
//! assert!(idle);
//! # }
//! ```

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// The work in flight, process-wide.
static PENDING: AtomicUsize = AtomicUsize::new(0);
/// Woken when the last piece of work ends.
static IDLE: Notify = Notify::const_new();

/// One piece of counted work; uncounted when dropped (ended, cancelled or panicked).
struct Counted;

impl Counted {
    fn new() -> Self {
        PENDING.fetch_add(1, Ordering::AcqRel);
        Self
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        if PENDING.fetch_sub(1, Ordering::AcqRel) == 1 {
            IDLE.notify_waiters();
        }
    }
}

/// Spawns `work` on the current tokio runtime, counted until it ends; `None` (and nothing
/// runs) outside a runtime.
pub fn spawn<F>(work: F) -> Option<JoinHandle<F::Output>>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    Some(spawn_on(&runtime, work))
}

/// Spawns `work` on `runtime`, counted until it ends: for work handed over where no runtime is
/// current (a destructor).
pub fn spawn_on<F>(runtime: &tokio::runtime::Handle, work: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let counted = Counted::new();
    runtime.spawn(async move {
        let _counted = counted;
        work.await
    })
}

/// How much background work is running now.
pub fn pending() -> usize {
    PENDING.load(Ordering::Acquire)
}

/// Waits until no background work is left, at most `within`: `true` if none is left. Call it
/// on shutdown, once the server stopped taking requests (and waited for the open ones), so that
/// handlers finishing for clients that left, and the records they store, end before the process.
pub async fn drained(within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let idle = IDLE.notified();
        if pending() == 0 {
            return true;
        }
        if tokio::time::timeout_at(deadline, idle).await.is_err() {
            return pending() == 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waits_for_spawned_work() {
        let (release, hold) = tokio::sync::oneshot::channel::<()>();
        let task = spawn(async move {
            let _ = hold.await;
        });
        assert!(task.is_some());
        assert!(!drained(Duration::from_millis(30)).await, "still running");
        let _ = release.send(());
        assert!(drained(Duration::from_secs(5)).await);
    }
}
