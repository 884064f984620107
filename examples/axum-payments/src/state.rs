//! The state every handler shares.

use std::sync::Arc;
use std::time::Duration;

use idempotency_core::background::Tracker;

use super::callers::Callers;
use super::memory::MemoryRepo;
use super::repo::PaymentsRepo;

/// What a paused handler logs (WARN) as its drill pause starts: the event crash drills wait for.
pub const DRILL_PAUSED: &str = "drill: handler paused after its writes";

/// The handlers' shared state: the repository, and the pause a crash drill puts inside the
/// handlers. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    /// Orders and coupons.
    pub repo: Arc<dyn PaymentsRepo>,
    /// How long the two POST handlers pause after their writes, before they commit or answer
    /// (`HANDLER_DELAY_MS`; zero by default): the window a crash drill kills the process in.
    pub handler_delay: Duration,
    /// The gateway's shared secret (`CALLBACK_SECRET`): with it, callbacks must carry its
    /// signature ([`signature`](super::signature)); without it they are not checked.
    pub callback_secret: Option<Arc<[u8]>>,
    /// Who may order (`API_TOKENS`): the caller each order's idempotency key is scoped by.
    pub callers: Callers,
    /// The layers' background work (handlers of departed clients, retried completes), which a
    /// shutdown waits for.
    pub background: Tracker,
}

impl AppState {
    /// State over any repository.
    pub fn new(repo: Arc<dyn PaymentsRepo>) -> Self {
        Self {
            repo,
            handler_delay: Duration::ZERO,
            callback_secret: None,
            callers: Callers::any_token(),
            background: Tracker::new(),
        }
    }

    /// State over a fresh [`MemoryRepo`].
    pub fn in_memory() -> Self {
        Self::new(Arc::new(MemoryRepo::new()))
    }

    /// The same state, with the handlers pausing `delay` after their writes.
    pub fn with_handler_delay(mut self, delay: Duration) -> Self {
        self.handler_delay = delay;
        self
    }

    /// The same state, with these callers.
    pub fn with_callers(mut self, callers: Callers) -> Self {
        self.callers = callers;
        self
    }

    /// The same state, with callbacks checked against the gateway's `secret`.
    pub fn with_callback_secret(mut self, secret: impl Into<Arc<[u8]>>) -> Self {
        self.callback_secret = Some(secret.into());
        self
    }

    /// The crash drill's pause, if one is set; it logs [`DRILL_PAUSED`] as it starts.
    pub(crate) async fn pause(&self) {
        if !self.handler_delay.is_zero() {
            // The event a drill waits for before it kills or stops the process.
            tracing::warn!(
                delay_ms = self.handler_delay.as_millis() as u64,
                "{DRILL_PAUSED}"
            );
            tokio::time::sleep(self.handler_delay).await;
        }
    }
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("handler_delay", &self.handler_delay)
            .field("callback_secret", &self.callback_secret.is_some())
            .finish_non_exhaustive()
    }
}
