//! The runs a completer finds on a core store: its abandoned records with checkpoints, by the
//! store's record scan (`idempotency-operations`).

use idempotency_core::{Error, Record, Store};
use idempotency_operations::{Cursor, Operations, PageRequest, Query, Status};

use crate::RunSource;

/// How many records one page of the scan examines.
const SCAN_BATCH: usize = 256;

/// How many records one sweep examines at most: a sweep is bounded however many records the
/// store holds (the runs beyond wait for later sweeps, or their clients' retries).
pub const DEFAULT_SCAN_LIMIT: u64 = 10_000;

/// The stopped runs of a core store, as a [`Completer`](crate::Completer) finds them: records
/// in progress whose lease ended (a dead or paused owner) and that have checkpoints, found by
/// the store's record scan ([`Operations::page`], which lists each record with its checkpoints:
/// one read per page of records, none per run).
///
/// ```
/// use idempotency_core::MemoryStore;
/// use idempotency_steps::Completer;
/// use idempotency_steps::leased::Abandoned;
///
/// let store = std::sync::Arc::new(MemoryStore::new());
/// let completer = Completer::new(Abandoned::new(store), "checkout");
/// # let _ = completer;
/// ```
#[derive(Clone, Debug)]
pub struct Abandoned<S> {
    store: S,
    scan_limit: u64,
}

impl<S> Abandoned<S> {
    /// The stopped runs of `store`, at most [`DEFAULT_SCAN_LIMIT`] records examined a sweep.
    pub fn new(store: S) -> Self {
        Self {
            store,
            scan_limit: DEFAULT_SCAN_LIMIT,
        }
    }

    /// At most `records` examined a sweep.
    pub fn with_scan_limit(mut self, records: u64) -> Self {
        self.scan_limit = records.max(1);
        self
    }
}

impl<S: Store + Operations> RunSource for Abandoned<S> {
    async fn resumable(&self, namespace: &str, limit: usize) -> Result<Vec<Record>, Error> {
        let query = Query::all().namespace(namespace).status(Status::Abandoned);
        let (mut cursor, mut examined, mut found) = (Cursor::start(), 0, Vec::new());
        loop {
            let request = PageRequest {
                query: &query,
                cursor: &cursor,
                batch: SCAN_BATCH,
            };
            let page = self.store.page(request).await?;
            examined += page.examined;
            let runs = page
                .records
                .into_iter()
                .filter(|record| record.progress.is_some());
            found.extend(runs.take(limit - found.len()));
            match page.next {
                Some(next) if found.len() < limit && examined < self.scan_limit => cursor = next,
                _ => break,
            }
        }
        found.sort_by_key(|record| record.updated_at);
        Ok(found)
    }
}
