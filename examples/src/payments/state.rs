//! The state every handler shares.

use std::sync::Arc;

use super::memory::MemoryRepo;
use super::repo::PaymentsRepo;

/// The handlers' shared state: the repository. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    /// Orders and coupons.
    pub repo: Arc<dyn PaymentsRepo>,
}

impl AppState {
    /// State over any repository.
    pub fn new(repo: Arc<dyn PaymentsRepo>) -> Self {
        Self { repo }
    }

    /// State over a fresh [`MemoryRepo`].
    pub fn in_memory() -> Self {
        Self::new(Arc::new(MemoryRepo::new()))
    }
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState").finish_non_exhaustive()
    }
}
