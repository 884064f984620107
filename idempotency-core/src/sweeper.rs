//! A background task that purges expired records of any store.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::Store;

/// A running sweeper; the task stops when this handle is dropped.
#[derive(Debug)]
pub struct Sweeper(JoinHandle<()>);

impl Drop for Sweeper {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Every `period`, purges expired records in batches of `batch` until a batch comes back short,
/// so no single statement holds locks for long.
///
/// ```
/// use idempotency_core::{spawn_sweeper, MemoryStore};
/// use std::{sync::Arc, time::Duration};
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let store = Arc::new(MemoryStore::new());
/// let _sweeper = spawn_sweeper(Arc::clone(&store), Duration::from_secs(60), 1_000);
/// # }
/// ```
pub fn spawn_sweeper<S: Store>(store: Arc<S>, period: Duration, batch: usize) -> Sweeper {
    Sweeper(tokio::spawn(async move {
        let mut ticker = tokio::time::interval(period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            loop {
                match store.purge_expired(batch).await {
                    Ok(purged) if purged as usize >= batch => continue,
                    Ok(purged) => {
                        tracing::debug!(purged, "swept expired idempotency records");
                        break;
                    }
                    Err(error) => {
                        tracing::warn!(%error, "sweeping expired idempotency records failed");
                        break;
                    }
                }
            }
        }
    }))
}
