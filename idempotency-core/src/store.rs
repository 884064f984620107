//! The store contract every backend implements once.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::{
    ClaimId, FencingToken, Fingerprint, Mechanism, Outcome, Progress, Record, RecordState,
    StorageKey, StoreError,
};

/// How long every store keeps an abandoned in-progress record after its lease ended (default of
/// each store's `with_abandoned_grace`): long enough that the next claim reports the takeover of
/// a crashed owner (`took_over`, `attempt + 1`) and operators can list it, not forever.
pub const DEFAULT_ABANDONED_GRACE: Duration = Duration::from_secs(60 * 60);

/// What [`Store::claim`] is asked to take.
#[derive(Clone, Copy, Debug)]
pub struct ClaimRequest<'a> {
    /// The hashed, scoped key.
    pub key: &'a StorageKey,
    /// The scope's namespace, kept in the clear for reconciliation.
    pub namespace: &'a str,
    /// What the key is used with this time.
    pub fingerprint: &'a Fingerprint,
    /// How long the claim holds before another caller may take it over.
    pub lease: Duration,
    /// The claimer's name for this claim, kept with it ([`Store::undo_claim`]).
    pub claim_id: ClaimId,
    /// The front end claiming, kept with the record it writes ([`Record::mechanism`]).
    pub mechanism: Option<Mechanism>,
    /// The version of the key derivation that derived `key`, kept with the record it writes
    /// ([`Record::key_derivation`]).
    pub key_derivation: Option<u8>,
}

/// What [`Store::complete`] is asked to store: `outcome` for `key`, kept for `ttl`, if the
/// claim of `token` still holds it.
#[derive(Clone, Copy, Debug)]
pub struct CompleteRequest<'a> {
    /// The hashed, scoped key.
    pub key: &'a StorageKey,
    /// The owner's fencing token.
    pub token: FencingToken,
    /// The outcome to replay to duplicates.
    pub outcome: &'a Outcome,
    /// How long the outcome is kept.
    pub ttl: Duration,
}

/// What [`Store::touch`] is asked to renew: the lease of `key` to `lease` from now, if the
/// claim of `token` still holds it.
#[derive(Clone, Copy, Debug)]
pub struct TouchRequest<'a> {
    /// The hashed, scoped key.
    pub key: &'a StorageKey,
    /// The owner's fencing token.
    pub token: FencingToken,
    /// The lease's new length, from now.
    pub lease: Duration,
}

/// A lease on a key: the right to execute and then complete or release it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The owner's fencing token.
    pub token: FencingToken,
    /// Which attempt this is (1 for the first owner).
    pub attempt: u32,
    /// Whether an expired lease of a crashed owner was taken over.
    pub took_over: bool,
}

/// What [`Store::claim`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// The key was free (absent, expired, or an expired lease): the caller owns it now.
    Acquired(Lease),
    /// Another owner holds a live lease.
    InProgress {
        /// Time left on that lease (it may be renewed).
        lease_remaining: Duration,
    },
    /// The key was completed with the same fingerprint: replay this.
    Completed(crate::Outcome),
    /// The key holds a live record with another fingerprint.
    Mismatch,
}

/// A backend for idempotency records.
///
/// Every step is atomic on its backend:
///
/// - [`claim`](Store::claim) takes the key (absent, completed-and-expired, or in progress with an
///   expired lease, with a strictly greater fencing token) or reports what is there. A live
///   record with another fingerprint is a [`Claim::Mismatch`]; an expired lease is taken over
///   whatever its fingerprint.
/// - [`complete`](Store::complete), [`release`](Store::release) and [`touch`](Store::touch)
///   apply only for the current token of an in-progress record; otherwise they change nothing and
///   return [`StoreError::LeaseLost`].
///
/// Implementations are checked by the conformance suite of the crate `idempotency-test`.
pub trait Store: Send + Sync + 'static {
    /// Takes the key or reports the record that holds it.
    fn claim(
        &self,
        request: ClaimRequest<'_>,
    ) -> impl Future<Output = Result<Claim, StoreError>> + Send;

    /// Stores the outcome and keeps it for `ttl`.
    fn complete(
        &self,
        request: CompleteRequest<'_>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The longest any call of this store takes, if the store bounds each call (all its round
    /// trips) itself and fails it with [`StoreError::Timeout`] past that. Callers that bound
    /// store calls (the engine does) then need no timer of their own when this is within
    /// theirs. `None`, the default: the store sets no bound of its own.
    fn call_bound(&self) -> Option<Duration> {
        None
    }

    /// Deletes an in-progress record so the next claim runs again.
    fn release(
        &self,
        key: &StorageKey,
        token: FencingToken,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Undoes a claim whose answer never came (a timeout, a reset connection): deletes the
    /// record if it is in progress under `claim_id`, and changes nothing otherwise (no such
    /// claim landed, or not yet, it was completed, or another claim holds the key). Returns
    /// whether it deleted the claim. Idempotent.
    fn undo_claim(
        &self,
        key: &StorageKey,
        claim_id: ClaimId,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Renews the lease to `lease` from now (keep-alive of a running handler).
    fn touch(
        &self,
        request: TouchRequest<'_>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The claim of `key` by `token` is left as it is, pending, until its lease ends (two
    /// tiers: the truth committed with the work): the store lets go of what it keeps in process
    /// for that lease. No round trip; the default keeps nothing.
    fn leave_pending(&self, key: &StorageKey, token: FencingToken) {
        let _ = (key, token);
    }

    /// Writes `progress` (a run's checkpoints, crate `idempotency-steps`) on the in-progress
    /// record of `request.key` held by `request.token` and renews its lease, in one step; read
    /// back in [`Record::progress`] while the record is in progress (a takeover keeps it; a
    /// takeover with another fingerprint is a [`Claim::Mismatch`]). [`StoreError::LeaseLost`]
    /// if the token does not hold it. The default keeps no checkpoints: [`StoreError::Config`].
    fn checkpoint(
        &self,
        request: TouchRequest<'_>,
        progress: &Progress,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let _ = (request, progress);
        std::future::ready(Err(StoreError::Config(
            "this store keeps no checkpoints".into(),
        )))
    }

    /// Reads a record as it is (expired records included until purged).
    fn get(
        &self,
        key: &StorageKey,
    ) -> impl Future<Output = Result<Option<Record>, StoreError>> + Send;

    /// Marks the record of `key` as having met a conflicting duplicate (the key again with
    /// another fingerprint, answered with the stored outcome or refused): one more in
    /// [`Record::conflicts`], [`Record::last_conflict_at`] now, by the store's clock. Nothing
    /// else changes (state, fingerprint, outcome, fencing token, expiry, last write), so an
    /// operator's fence still holds. One round trip. Returns whether a record was there to
    /// mark. A claim that starts the record anew (an absent or expired key, a takeover) starts
    /// it unmarked.
    ///
    /// The default marks nothing and returns `Ok(false)`: a store that keeps no mark still
    /// answers conflicts, and reconciliation lists none of its records as conflicting.
    fn mark_conflict(
        &self,
        key: &StorageKey,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        let _ = key;
        std::future::ready(Ok(false))
    }

    /// Subscribes to the wake-ups of `key`, for the duplicates waiting while it is in flight:
    /// the receiver changes when the store hears that the key was completed or released, by
    /// any process. The subscription is live when this returns (the record is read after it,
    /// so no landing falls between), holds while a receiver is kept, and was lost if the
    /// receiver errs. `None`, the default: no wake-ups, waiters poll.
    fn wake_ups(
        &self,
        key: &StorageKey,
    ) -> impl Future<Output = Option<watch::Receiver<()>>> + Send {
        let _ = key;
        std::future::ready(None)
    }

    /// Deletes up to `limit` expired records (completed past their TTL, or abandoned leases
    /// whose end is more than the store's abandoned grace ago, [`DEFAULT_ABANDONED_GRACE`] by
    /// default) and returns how many went. Stores with native expiry may return 0.
    fn purge_expired(&self, limit: usize) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Completes the in-progress record of `key` with `outcome`, kept for `ttl`, if it was
    /// claimed with `fingerprint`, whichever claim holds it: what a caller that learnt
    /// elsewhere that the key's work committed (two tiers: the record of truth) does to a claim
    /// left pending. Returns whether it completed the record; one absent, completed, or of
    /// another fingerprint is left as it is (`Ok(false)`).
    ///
    /// The default reads the record, then completes it with the token it read
    /// ([`get`](Store::get), then [`complete`](Store::complete): two round trips; a claim taken
    /// over between them is left, `Ok(false)`). A store that can check and complete in one
    /// step overrides it.
    fn settle(
        &self,
        key: &StorageKey,
        fingerprint: &Fingerprint,
        outcome: &Outcome,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        async move {
            let Some(record) = self.get(key).await? else {
                return Ok(false);
            };
            if record.state != RecordState::InProgress || record.fingerprint != *fingerprint {
                return Ok(false);
            }
            let request = CompleteRequest {
                key,
                token: record.token,
                outcome,
                ttl,
            };
            match self.complete(request).await {
                Ok(()) => Ok(true),
                Err(StoreError::LeaseLost) => Ok(false),
                Err(error) => Err(error),
            }
        }
    }
}

/// A boxed future, as [`DynStore`] returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The object-safe twin of [`Store`], implemented for every store, so a store chosen at run time
/// can be held as a [`BoxStore`]. Costs one allocation per call.
#[allow(missing_docs)]
pub trait DynStore: Send + Sync + 'static {
    fn claim_dyn<'a>(
        &'a self,
        request: ClaimRequest<'a>,
    ) -> BoxFuture<'a, Result<Claim, StoreError>>;
    fn complete_dyn<'a>(
        &'a self,
        request: CompleteRequest<'a>,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    fn release_dyn<'a>(
        &'a self,
        key: &'a StorageKey,
        token: FencingToken,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    fn undo_claim_dyn<'a>(
        &'a self,
        key: &'a StorageKey,
        claim_id: ClaimId,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;
    fn touch_dyn<'a>(&'a self, request: TouchRequest<'a>) -> BoxFuture<'a, Result<(), StoreError>>;
    fn checkpoint_dyn<'a>(
        &'a self,
        request: TouchRequest<'a>,
        progress: &'a Progress,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    fn get_dyn<'a>(
        &'a self,
        key: &'a StorageKey,
    ) -> BoxFuture<'a, Result<Option<Record>, StoreError>>;
    fn purge_expired_dyn(&self, limit: usize) -> BoxFuture<'_, Result<u64, StoreError>>;
    fn call_bound_dyn(&self) -> Option<Duration>;
    fn leave_pending_dyn(&self, key: &StorageKey, token: FencingToken);
    fn mark_conflict_dyn<'a>(
        &'a self,
        key: &'a StorageKey,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;
    fn wake_ups_dyn<'a>(
        &'a self,
        key: &'a StorageKey,
    ) -> BoxFuture<'a, Option<watch::Receiver<()>>>;
    fn settle_dyn<'a>(
        &'a self,
        key: &'a StorageKey,
        fingerprint: &'a Fingerprint,
        outcome: &'a Outcome,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;
}

impl<S: Store> DynStore for S {
    fn claim_dyn<'a>(
        &'a self,
        request: ClaimRequest<'a>,
    ) -> BoxFuture<'a, Result<Claim, StoreError>> {
        Box::pin(self.claim(request))
    }
    fn complete_dyn<'a>(
        &'a self,
        request: CompleteRequest<'a>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.complete(request))
    }
    fn release_dyn<'a>(
        &'a self,
        key: &'a StorageKey,
        token: FencingToken,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.release(key, token))
    }
    fn undo_claim_dyn<'a>(
        &'a self,
        key: &'a StorageKey,
        claim_id: ClaimId,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.undo_claim(key, claim_id))
    }
    fn touch_dyn<'a>(&'a self, request: TouchRequest<'a>) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.touch(request))
    }
    fn checkpoint_dyn<'a>(
        &'a self,
        request: TouchRequest<'a>,
        progress: &'a Progress,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.checkpoint(request, progress))
    }
    fn get_dyn<'a>(
        &'a self,
        key: &'a StorageKey,
    ) -> BoxFuture<'a, Result<Option<Record>, StoreError>> {
        Box::pin(self.get(key))
    }
    fn purge_expired_dyn(&self, limit: usize) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(self.purge_expired(limit))
    }
    fn call_bound_dyn(&self) -> Option<Duration> {
        self.call_bound()
    }
    fn leave_pending_dyn(&self, key: &StorageKey, token: FencingToken) {
        self.leave_pending(key, token)
    }
    fn mark_conflict_dyn<'a>(
        &'a self,
        key: &'a StorageKey,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.mark_conflict(key))
    }
    fn wake_ups_dyn<'a>(
        &'a self,
        key: &'a StorageKey,
    ) -> BoxFuture<'a, Option<watch::Receiver<()>>> {
        Box::pin(self.wake_ups(key))
    }
    fn settle_dyn<'a>(
        &'a self,
        key: &'a StorageKey,
        fingerprint: &'a Fingerprint,
        outcome: &'a Outcome,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.settle(key, fingerprint, outcome, ttl))
    }
}

/// A store chosen at run time (for example from `IDEMPOTENCY_STORE`).
///
/// ```
/// use idempotency_core::{BoxStore, MemoryStore};
/// let store = BoxStore::new(MemoryStore::new());
/// # let _ = store;
/// ```
#[derive(Clone)]
pub struct BoxStore(Arc<dyn DynStore>);

impl BoxStore {
    /// Boxes any store.
    pub fn new(store: impl Store) -> Self {
        Self(Arc::new(store))
    }
}

impl std::fmt::Debug for BoxStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BoxStore")
    }
}

impl Store for BoxStore {
    async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        self.0.claim_dyn(request).await
    }
    async fn complete(&self, request: CompleteRequest<'_>) -> Result<(), StoreError> {
        self.0.complete_dyn(request).await
    }
    async fn release(&self, key: &StorageKey, token: FencingToken) -> Result<(), StoreError> {
        self.0.release_dyn(key, token).await
    }
    async fn undo_claim(&self, key: &StorageKey, claim_id: ClaimId) -> Result<bool, StoreError> {
        self.0.undo_claim_dyn(key, claim_id).await
    }
    async fn touch(&self, request: TouchRequest<'_>) -> Result<(), StoreError> {
        self.0.touch_dyn(request).await
    }
    async fn checkpoint(
        &self,
        request: TouchRequest<'_>,
        progress: &Progress,
    ) -> Result<(), StoreError> {
        self.0.checkpoint_dyn(request, progress).await
    }
    async fn get(&self, key: &StorageKey) -> Result<Option<Record>, StoreError> {
        self.0.get_dyn(key).await
    }
    async fn purge_expired(&self, limit: usize) -> Result<u64, StoreError> {
        self.0.purge_expired_dyn(limit).await
    }
    fn call_bound(&self) -> Option<Duration> {
        self.0.call_bound_dyn()
    }
    fn leave_pending(&self, key: &StorageKey, token: FencingToken) {
        self.0.leave_pending_dyn(key, token)
    }
    async fn mark_conflict(&self, key: &StorageKey) -> Result<bool, StoreError> {
        self.0.mark_conflict_dyn(key).await
    }
    async fn wake_ups(&self, key: &StorageKey) -> Option<watch::Receiver<()>> {
        self.0.wake_ups_dyn(key).await
    }
    async fn settle(
        &self,
        key: &StorageKey,
        fingerprint: &Fingerprint,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        self.0.settle_dyn(key, fingerprint, outcome, ttl).await
    }
}

impl<S: Store> Store for Arc<S> {
    fn claim(
        &self,
        request: ClaimRequest<'_>,
    ) -> impl Future<Output = Result<Claim, StoreError>> + Send {
        (**self).claim(request)
    }
    fn complete(
        &self,
        request: CompleteRequest<'_>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).complete(request)
    }
    fn release(
        &self,
        key: &StorageKey,
        token: FencingToken,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).release(key, token)
    }
    fn undo_claim(
        &self,
        key: &StorageKey,
        claim_id: ClaimId,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        (**self).undo_claim(key, claim_id)
    }
    fn touch(
        &self,
        request: TouchRequest<'_>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).touch(request)
    }
    fn checkpoint(
        &self,
        request: TouchRequest<'_>,
        progress: &Progress,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).checkpoint(request, progress)
    }
    fn get(
        &self,
        key: &StorageKey,
    ) -> impl Future<Output = Result<Option<Record>, StoreError>> + Send {
        (**self).get(key)
    }
    fn purge_expired(&self, limit: usize) -> impl Future<Output = Result<u64, StoreError>> + Send {
        (**self).purge_expired(limit)
    }
    fn call_bound(&self) -> Option<Duration> {
        (**self).call_bound()
    }
    fn leave_pending(&self, key: &StorageKey, token: FencingToken) {
        (**self).leave_pending(key, token)
    }
    fn mark_conflict(
        &self,
        key: &StorageKey,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        (**self).mark_conflict(key)
    }
    fn wake_ups(
        &self,
        key: &StorageKey,
    ) -> impl Future<Output = Option<watch::Receiver<()>>> + Send {
        (**self).wake_ups(key)
    }
    fn settle(
        &self,
        key: &StorageKey,
        fingerprint: &Fingerprint,
        outcome: &Outcome,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        (**self).settle(key, fingerprint, outcome, ttl)
    }
}
