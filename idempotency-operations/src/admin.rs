//! [`Admin`]: the operations over any store that brings [`Operations`].

use crate::{PageRequest, PurgeRequest};
use std::sync::Arc;
use std::time::SystemTime;

use super::{
    Acted, Action, Actor, Archive, AuditEntry, AuditLog, AuditedStep, Counts, Cursor,
    DEFAULT_BATCH, Fence, FenceRefusal, Operations, Page, Query, RecordView, Step,
};
use idempotency_core::{
    CompleteRequest, Mechanism, Record, RecordState, Scope, StorageKey, StoreError, TouchRequest,
    telemetry,
};
use tracing::Instrument;

impl Step<'_> {
    fn action(&self) -> Action {
        match self {
            Self::Release => Action::Release,
            Self::Complete(..) => Action::Complete,
            Self::Delete => Action::Delete,
            Self::Resume => Action::Resume,
        }
    }

    /// Runs the step: whether it applied (a stale token: `false` or `LeaseLost`).
    async fn run(
        &self,
        store: &dyn Operations,
        key: &StorageKey,
        token: idempotency_core::FencingToken,
    ) -> Result<bool, StoreError> {
        match self {
            Self::Release => store.release_dyn(key, token).await.map(|()| true),
            Self::Complete(outcome, ttl) => store
                .complete_dyn(CompleteRequest {
                    key,
                    token,
                    outcome,
                    ttl: *ttl,
                })
                .await
                .map(|()| true),
            Self::Delete => store.delete_fenced(key, token).await,
            Self::Resume => store
                .touch_dyn(TouchRequest {
                    key,
                    token,
                    // The shortest lease every store takes (Redis refuses 0).
                    lease: std::time::Duration::from_millis(1),
                })
                .await
                .map(|()| true),
        }
    }
}

/// Records on an action's span what it did: applied, refused (and why), or failed.
fn record_outcome(span: &tracing::Span, acted: &Result<Acted, StoreError>) {
    if span.is_disabled() {
        return;
    }
    match acted {
        Ok(Acted::Applied) => span.record(telemetry::ADMIN_RESULT, "applied"),
        Ok(Acted::Refused { refusal, .. }) => {
            span.record(telemetry::ADMIN_RESULT, refusal.as_str())
        }
        Err(error) => span.record(telemetry::ERROR_TYPE, telemetry::error_type(error)),
    };
}

/// How far a long scan or purge has come, reported after each batch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Records examined so far.
    pub examined: u64,
    /// Records found (listed, counted or purged) so far.
    pub done: u64,
    /// Where the scan would resume; `None` once it is complete.
    pub cursor: Option<Cursor>,
}

/// What a purge did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PurgeReport {
    /// Records deleted (and archived).
    pub purged: u64,
    /// Records examined.
    pub examined: u64,
    /// Batches run.
    pub batches: u64,
    /// Where a purge stopped by its batch limit resumes; `None` once it is complete.
    pub next: Option<Cursor>,
}

/// Operations on one store: list, count, inspect, reconcile, and the fenced, audited actions
/// (release, complete, delete, purge). Cheap to clone.
#[derive(Clone)]
pub struct Admin {
    store: Arc<dyn Operations>,
    audit: Arc<dyn AuditLog>,
    batch: usize,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin")
            .field("batch", &self.batch)
            .finish_non_exhaustive()
    }
}

impl Admin {
    /// Operations on `store`, its actions audited to `audit`.
    pub fn new(store: impl Operations, audit: impl AuditLog) -> Self {
        Self::from_shared(Arc::new(store), Arc::new(audit))
    }

    /// Operations on a store and an audit log chosen at run time.
    pub fn from_shared(store: Arc<dyn Operations>, audit: Arc<dyn AuditLog>) -> Self {
        Self {
            store,
            audit,
            batch: DEFAULT_BATCH,
        }
    }

    /// Examines at most about `batch` records per round trip (default [`DEFAULT_BATCH`]; at
    /// least 1).
    pub fn with_batch(mut self, batch: usize) -> Self {
        self.batch = batch.max(1);
        self
    }

    /// The store.
    pub fn store(&self) -> &dyn Operations {
        &*self.store
    }

    /// The storage key of a raw `key`, as a service with `scope` and `mechanism` derives it
    /// (HTTP and gRPC layers: [`Mechanism::Request`], with the principal the layer extracts).
    pub fn storage_key(scope: &Scope, mechanism: Mechanism, key: &str) -> StorageKey {
        scope.storage_key_for(mechanism, key)
    }

    /// One batch of the records matching `query`, from `cursor`.
    pub async fn scan(&self, query: &Query, cursor: &Cursor) -> Result<Page, StoreError> {
        self.store
            .page(PageRequest {
                query,
                cursor,
                batch: self.batch,
            })
            .await
    }

    /// The records matching `query`, at most `limit`, scanned in batches; `progress` is told
    /// after each.
    pub async fn list(
        &self,
        query: &Query,
        limit: usize,
        progress: &mut (dyn FnMut(&Progress) + Send),
    ) -> Result<Vec<Record>, StoreError> {
        let mut found = Vec::new();
        let mut state = Progress::default();
        let mut cursor = Cursor::start();
        while found.len() < limit {
            let page = self.scan(query, &cursor).await?;
            state.examined += page.examined;
            let room = limit - found.len();
            found.extend(page.records.into_iter().take(room));
            state.done = found.len() as u64;
            state.cursor = page.next.clone();
            progress(&state);
            match page.next {
                Some(next) => cursor = next,
                None => break,
            }
        }
        Ok(found)
    }

    /// Records matching `query` per status, and the age of the oldest abandoned one.
    pub async fn count(
        &self,
        query: &Query,
        progress: &mut (dyn FnMut(&Progress) + Send),
    ) -> Result<Counts, StoreError> {
        if let Some(counts) = self.store.count_fast(query).await? {
            progress(&Progress {
                examined: counts.examined,
                done: counts.total(),
                cursor: None,
            });
            return Ok(counts);
        }
        let mut counts = Counts::default();
        let mut state = Progress::default();
        let mut cursor = Cursor::start();
        loop {
            let page = self.scan(query, &cursor).await?;
            let now = SystemTime::now();
            counts.examined += page.examined;
            for record in &page.records {
                counts.add(record, now);
            }
            state.examined = counts.examined;
            state.done = counts.total();
            state.cursor = page.next.clone();
            progress(&state);
            match page.next {
                Some(next) => cursor = next,
                None => return Ok(counts),
            }
        }
    }

    /// [`count`](Self::count)s the records of `namespace` (every namespace: `None`) and sets the
    /// gauges [`RECORDS`](idempotency_core::metrics::RECORDS) and
    /// [`OLDEST_ABANDONED`](idempotency_core::metrics::OLDEST_ABANDONED) from the counts: call it on a
    /// timer (a minute, say) where the store counts cheaply (SQL), less often on Redis (a scan
    /// of every record).
    pub async fn publish_gauges(&self, namespace: Option<&str>) -> Result<Counts, StoreError> {
        let query = Query {
            namespace: namespace.map(str::to_owned),
            ..Query::default()
        };
        let counts = self.count(&query, &mut |_| {}).await?;
        counts.publish(namespace.unwrap_or(""));
        Ok(counts)
    }

    /// The record of `key`, as it is.
    pub async fn inspect(&self, key: &StorageKey) -> Result<Option<Record>, StoreError> {
        self.store.get_dyn(key).await
    }

    /// Each key's record (`None`: no record), in the order given: the reconciliation of a list
    /// of keys (finance's trade numbers for a day, say).
    pub async fn reconcile(&self, keys: &[StorageKey]) -> Result<Vec<Option<Record>>, StoreError> {
        let mut records = Vec::with_capacity(keys.len());
        for key in keys {
            records.push(self.store.get_dyn(key).await?);
        }
        Ok(records)
    }

    /// Applies `step` to the record of `key` if it is still the one `fence` was taken of,
    /// audited either way: [`Step::Release`] an in-progress record, so that the next retry runs
    /// the work again; [`Step::Complete`] it by hand (manual reconciliation: the work was done,
    /// duplicates get the outcome, whose body is the front end's encoding: an HTTP layer
    /// replays a `StoredResponse` of `idempotency-tower`; for a run with steps, this abandons it
    /// with that answer); [`Step::Delete`] it in any state (a completed record deleted lets the
    /// key run again); [`Step::Resume`] an in-progress run, its lease ended now so that the next
    /// claim (a retry, the completer) takes it over after its last checkpoint.
    ///
    /// The record is read and compared with the fence, then changed by a step the store itself
    /// fences by the token, so an owner that took the key over between the read and the step
    /// is never touched.
    pub async fn act(
        &self,
        key: &StorageKey,
        fence: Fence,
        actor: &Actor,
        step: Step<'_>,
    ) -> Result<Acted, StoreError> {
        let action = step.action();
        let span = telemetry::admin_span(action.as_str(), None, Some(key));
        if !span.is_disabled() {
            span.record(telemetry::FENCING_TOKEN, fence.token.get());
        }
        let acted = async {
            let current = self.store.get_dyn(key).await?;
            let needs_in_progress = action != Action::Delete;
            let refusal = match &current {
                None => Some(FenceRefusal::Absent),
                Some(record) if !fence.holds(record) => Some(FenceRefusal::MovedOn),
                Some(record) if needs_in_progress && record.state != RecordState::InProgress => {
                    Some(FenceRefusal::NotInProgress)
                }
                Some(_) => None,
            };
            let was = current
                .as_ref()
                .map(|record| RecordView::of(record, SystemTime::now()));
            let entry = |applied: bool, refusal: Option<FenceRefusal>| {
                let detail = refusal.map_or("applied", FenceRefusal::as_str);
                AuditEntry::new(actor, action, applied, detail).on(key, was.clone())
            };
            if let Some(refusal) = refusal {
                self.audited(&entry(false, Some(refusal))).await?;
                return Ok(Acted::Refused {
                    refusal,
                    current: current.map(Box::new),
                });
            }
            // Where the audit table is in the store's database, the step and its entry commit
            // together: an action is never applied unaudited.
            let entry_of_step =
                |applied: bool| entry(applied, (!applied).then_some(FenceRefusal::MovedOn));
            let atomic = self.store.act_audited(AuditedStep {
                key,
                token: fence.token,
                step,
                audit: &*self.audit,
                entry: &entry_of_step,
            });
            let applied = match atomic {
                Some(atomic) => atomic.await?,
                None => {
                    let applied = match step.run(&*self.store, key, fence.token).await {
                        Ok(applied) => applied,
                        Err(StoreError::LeaseLost) => false,
                        Err(error) => return Err(error),
                    };
                    self.audited(&entry_of_step(applied)).await?;
                    applied
                }
            };
            Ok(if applied {
                Acted::Applied
            } else {
                Acted::Refused {
                    refusal: FenceRefusal::MovedOn,
                    current: self.store.get_dyn(key).await?.map(Box::new),
                }
            })
        }
        .instrument(span.clone())
        .await;
        record_outcome(&span, &acted);
        acted
    }

    /// Writes `entry`; a failure says whether the action applied.
    async fn audited(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        self.audit.write(entry).await.map_err(|error| {
            StoreError::Backend(
                format!(
                    "{} {} but its audit entry could not be written: {error}",
                    entry.action.as_str(),
                    if entry.applied { "applied" } else { "refused" },
                )
                .into(),
            )
        })
    }

    /// Purges expired records ([`purgeable`](super::purgeable)), of `namespace` if given, in
    /// batches from `from` (a cursor a stopped purge reported, or the start), copying each
    /// to `archive` first; audited once for the run. Live records are never touched: each
    /// delete is fenced (the expiry condition on SQL, the token elsewhere).
    pub async fn purge(
        &self,
        namespace: Option<&str>,
        archive: &mut Archive,
        from: Cursor,
        actor: &Actor,
        progress: &mut (dyn FnMut(&Progress) + Send),
    ) -> Result<PurgeReport, StoreError> {
        self.purge_batches(namespace, archive, from, u64::MAX, actor, progress)
            .await
    }

    /// [`purge`](Self::purge), at most `max_batches` batches (an HTTP request's share of a
    /// long purge): the report's `next` is where the next call resumes.
    pub async fn purge_batches(
        &self,
        namespace: Option<&str>,
        archive: &mut Archive,
        from: Cursor,
        max_batches: u64,
        actor: &Actor,
        progress: &mut (dyn FnMut(&Progress) + Send),
    ) -> Result<PurgeReport, StoreError> {
        let span = telemetry::admin_span(Action::Purge.as_str(), namespace, None);
        let purged = async {
            let mut report = PurgeReport::default();
            let mut cursor = from;
            let result = loop {
                let batch = self
                    .store
                    .purge_page(PurgeRequest {
                        namespace,
                        cursor: &cursor,
                        batch: self.batch,
                        archive,
                    })
                    .await;
                let batch = match batch {
                    Ok(batch) => batch,
                    Err(error) => break Err(error),
                };
                report.batches += 1;
                report.purged += batch.purged;
                report.examined += batch.examined;
                progress(&Progress {
                    examined: report.examined,
                    done: report.purged,
                    cursor: batch.next.clone(),
                });
                match batch.next {
                    Some(next) if report.batches < max_batches => cursor = next,
                    next => {
                        report.next = next;
                        break Ok(());
                    }
                }
            };
            let detail = match &result {
                Ok(()) => format!(
                    "purged {} of {} examined in {} batches ({archive:?})",
                    report.purged, report.examined, report.batches
                ),
                Err(error) => format!(
                    "stopped after {} purged at cursor {cursor:?}: {error}",
                    report.purged
                ),
            };
            let entry = AuditEntry::new(actor, Action::Purge, report.purged > 0, detail)
                .in_namespace(namespace);
            self.audited(&entry).await?;
            result.map(|()| report)
        }
        .instrument(span.clone())
        .await;
        if let Err(error) = &purged {
            span.record(telemetry::ERROR_TYPE, telemetry::error_type(error));
        }
        purged
    }
}
