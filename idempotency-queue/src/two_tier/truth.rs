//! The SQL tier: dedup record and business writes in one transaction.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use idempotency_core::{Mechanism, Outcome, Scope};
use idempotency_sql::{TxClaim, TxStore};
use serde::Serialize;

use super::tx::AfterCommit;
use super::{FromJob, TruthError, Tx};
use crate::{Handled, Handler, Job, consumer};

/// How long the truth keeps a completed record by default: 7 days. Longer than the common
/// senders' retry schedules (Alipay's notifications span about 25 h, Stripe retries webhooks
/// for 3 days) and than a fast tier's usual TTL (24 to 48 h), so a fast-tier miss after a flush
/// always finds the record and never runs the work again.
pub const DEFAULT_TRUTH_TTL: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// Counter of jobs a [`SqlTruth`] ran for a consumer that does not defer to it (a wrapper
/// around it that forgot [`Handler::guards_itself`]), labelled `namespace`.
pub const UNDEFERRED_TRUTH: &str = "idempotency_queue_undeferred_truth_total";

/// A transaction the business code ran in, its after-commit hooks, and its outcome.
type Ran<DB> = (sqlx::Transaction<'static, DB>, Vec<AfterCommit>, Outcome);

/// The business code of a [`SqlTruth`]: an `async` closure over the transaction and what it
/// reads from the job ([`FromJob`]: the [`Job`], or its payload decoded, [`Json`](super::Json)),
/// returning what it produced, which the truth stores as the key's outcome.
///
/// Every `Fn(Tx<DB>, I) -> impl Future<Output = Result<O, E>>` is one, where `O` serializes
/// (to JSON) and `E` displays. The arguments are owned, so a closure of your own wraps one
/// without higher-ranked lifetimes:
///
/// ```
/// use idempotency_queue::two_tier::{Business, Json, Tx};
///
/// #[derive(serde::Deserialize)]
/// struct Paid { trade_no: String }
///
/// async fn grant(tx: Tx<sqlx::Postgres>, Json(paid): Json<Paid>) -> Result<i64, sqlx::Error> {
///     sqlx::query_scalar("INSERT INTO coupons (trade_no) VALUES ($1) RETURNING id")
///         .bind(paid.trade_no)
///         .fetch_one(&mut *tx.conn().await)
///         .await
/// }
///
/// // A step of your own around it: still a plain closure.
/// let logged = |tx: Tx<sqlx::Postgres>, paid: Json<Paid>| async move {
///     let coupon = grant(tx, paid).await?;
///     tracing::info!(coupon, "coupon granted");
///     Ok::<_, sqlx::Error>(coupon)
/// };
/// fn is_business<B: Business<sqlx::Postgres, Json<Paid>>>(_: &B) {}
/// is_business(&grant);
/// is_business(&logged);
/// ```
pub trait Business<DB: sqlx::Database, I>: Send + Sync + 'static {
    /// What the business code produced (stored as JSON, the key's outcome on both tiers).
    type Output: Serialize;
    /// Why the business code failed.
    type Error: fmt::Display + Send + 'static;

    /// Runs the business code for `input` in `tx`.
    fn run(
        &self,
        tx: Tx<DB>,
        input: I,
    ) -> impl Future<Output = Result<Self::Output, Self::Error>> + Send;
}

impl<DB, I, F, Fut, O, E> Business<DB, I> for F
where
    DB: sqlx::Database,
    F: Fn(Tx<DB>, I) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, E>> + Send,
    O: Serialize,
    E: fmt::Display + Send + 'static,
{
    type Output = O;
    type Error = E;

    fn run(&self, tx: Tx<DB>, input: I) -> impl Future<Output = Result<O, E>> + Send {
        self(tx, input)
    }
}

/// A [`Handler`] that runs `business` inside a transaction which also writes the job's dedup
/// record in `store`, completed with what the business code produced (the key's outcome), and
/// commits both together.
///
/// - A **first copy** (the fast tier's first claim of the key, [`Job::lease`]) runs the
///   business code first and writes its record last ([`TxStore::record_in_tx`], one statement
///   on PostgreSQL): the transaction of the post-mortem's consumer, a dedup row after the
///   business writes. A copy that got this far too (the fast tier lost the claim: a flush, a
///   fail-over) waits on that record, rolls its own writes back and answers as below; its
///   business code ran, so anything it did outside the transaction would happen again (such
///   effects belong in [`Tx::after_commit`]).
/// - **Any other copy** (the fast tier saw the key, or there is none) claims the record first
///   ([`TxStore::claim_key_in_tx`]) and runs the business code only when it is taken:
///
/// | SQL claim | what happens |
/// |---|---|
/// | (the input cannot be read from the job) | nothing claimed, nothing runs → [`Handled::Invalid`] (rejected) |
/// | `Execute` | `business(tx, input)`, its output stored (JSON) with the record, one commit → [`Handled::Output`] |
/// | `Replay` (committed before) | rollback, nothing runs → [`Handled::AlreadyDone`] with the stored output |
/// | `Mismatch` (key used with another payload) | rollback, nothing runs, logged → [`Handled::Mismatch`] (rejected) |
/// | `InFlight` (another transaction still holds the key after the store's in-flight wait, 5 s by default) | rollback → [`Handled::InFlight`] (requeued) |
///
/// The record keeps [`Job::fingerprint`], the consumer's fingerprint of the message, so both
/// tiers compare payloads the same way. It guards itself ([`Handler::guards_itself`]): the
/// consumer lets it decide whenever its fast tier cannot.
///
/// A business error, a panic, or a crash before commit rolls everything back. The business code
/// must write through its [`Tx`] only: writes elsewhere are outside the guarantee. What must
/// follow the commit (a log line of the grant, waking a relay) goes to
/// [`Tx::after_commit`]: it runs once the commit succeeded, before the answer, never after a
/// rollback or for a replay.
///
/// ```
/// use idempotency_core::Scope;
/// use idempotency_sql::PostgresStore;
/// use idempotency_queue::two_tier::{Json, SqlTruth, Tx};
///
/// #[derive(serde::Deserialize)]
/// struct Paid { trade_no: String, user_id: i64 }
///
/// fn coupon_grant(pool: sqlx::PgPool) -> impl idempotency_queue::Handler {
///     let store = PostgresStore::new(pool);
///     SqlTruth::new(store, Scope::new("coupon-grant"), |tx: Tx<sqlx::Postgres>, Json(paid): Json<Paid>| async move {
///         sqlx::query_scalar::<_, i64>(
///             "INSERT INTO coupon_grants (trade_no, user_id) VALUES ($1, $2) RETURNING id",
///         )
///         .bind(paid.trade_no)
///         .bind(paid.user_id)
///         .fetch_one(&mut *tx.conn().await)
///         .await
///     })
/// }
/// ```
pub struct SqlTruth<T: TxStore, I, B> {
    store: T,
    scope: Scope,
    ttl: Duration,
    business: B,
    input: PhantomData<fn() -> I>,
    /// Whether the wrapper warning was logged (once per truth).
    warned_undeferred: AtomicBool,
}

impl<T: TxStore, I, B> fmt::Debug for SqlTruth<T, I, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlTruth")
            .field("scope", &self.scope)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl<T, I, B> SqlTruth<T, I, B>
where
    T: TxStore,
    I: FromJob,
    B: Business<T::Database, I>,
{
    /// Guards `business` with dedup records of `store` in `scope`, claimed in the transactions
    /// `store` begins ([`TxStore::begin`]) on its pool: the record and the business writes
    /// share the transaction, in the same database. Completed records are kept for
    /// [`DEFAULT_TRUTH_TTL`] (7 days), see [`with_ttl`](Self::with_ttl).
    pub fn new(store: T, scope: Scope, business: B) -> Self {
        Self {
            store,
            scope,
            ttl: DEFAULT_TRUTH_TTL,
            business,
            input: PhantomData,
            warned_undeferred: AtomicBool::new(false),
        }
    }

    /// How long a completed record is kept (default [`DEFAULT_TRUTH_TTL`], 7 days; this
    /// replaces the store's `with_tx_ttl` for the truth's records). Keep it longer than every
    /// retry horizon: the senders' (a gateway's retry schedule), the broker's (its retention and
    /// redelivery) and the fast tier's TTL, which [`TwoTier`](super::TwoTier) checks.
    #[must_use]
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long a completed record is kept.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The scope keys are claimed in (the consumer built by [`TwoTier`](super::TwoTier) uses
    /// the same).
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The dedup store.
    pub fn store(&self) -> &T {
        &self.store
    }

    /// Runs the job: claim, business, outcome, commit, then the business code's
    /// [`Tx::after_commit`] hooks. A first copy (the fast tier's first claim of the key) runs
    /// the business code first and writes its record last, completed: see
    /// [`TxStore::record_in_tx`].
    pub async fn run(&self, job: &Job) -> Result<Handled, TruthError<B::Error>> {
        let input = match I::from_job(job) {
            Ok(input) => input,
            Err(reason) => return Ok(Handled::Invalid(reason)),
        };
        self.check_deferred_to();
        let tx = self.store.begin().await.map_err(TruthError::Store)?;
        if job
            .lease
            .is_some_and(|lease| lease.attempt == 1 && !lease.took_over)
        {
            return self.record_last(tx, job, input).await;
        }
        self.claim_first(tx, job, input).await
    }

    /// A first copy: the fast tier's claim keeps other copies from running meanwhile, and
    /// cannot tell whether this one's work committed; the record of truth, written last in the
    /// business transaction (one statement on PostgreSQL), can. A copy that ran anyway (the
    /// fast tier lost its claim) meets this one's record: it waits for its commit, rolls back,
    /// and answers as a claim would.
    async fn record_last(
        &self,
        tx: sqlx::Transaction<'static, T::Database>,
        job: &Job,
        input: I,
    ) -> Result<Handled, TruthError<B::Error>> {
        let (mut tx, after_commit, outcome) = self.business(tx, input).await?;
        let found = self
            .store
            .record_in_tx(
                &mut tx,
                &self.scope,
                Mechanism::Message,
                job.key.as_str(),
                &job.fingerprint,
                Some(self.ttl),
                &outcome,
            )
            .await
            .map_err(TruthError::Store)?;
        match found {
            None => self.commit(tx, after_commit, outcome).await,
            Some(claim) => {
                let _ = tx.rollback().await;
                Ok(self.found(claim, job).await)
            }
        }
    }

    /// Any other copy: the record claimed first (waiting on a concurrent copy's transaction),
    /// the business code run only if the claim is taken.
    async fn claim_first(
        &self,
        mut tx: sqlx::Transaction<'static, T::Database>,
        job: &Job,
        input: I,
    ) -> Result<Handled, TruthError<B::Error>> {
        // Keyed as a message, as the fast tier keys it (one storage key in both tiers), with
        // the truth's TTL instead of the store's.
        let claim = self
            .store
            .claim_key_in_tx(
                &mut tx,
                &self.scope,
                Mechanism::Message,
                job.key.as_str(),
                &job.fingerprint,
                Some(self.ttl),
            )
            .await
            .map_err(TruthError::Store)?;
        let lease = match claim {
            TxClaim::Execute(lease) => lease,
            found => {
                // The claim wrote nothing: end its transaction (SQLite's write lock with it)
                // before a mark's own statement.
                let _ = tx.rollback().await;
                return Ok(self.found(found, job).await);
            }
        };
        let (mut tx, after_commit, outcome) = self.business(tx, input).await?;
        self.store
            .complete_in_tx(&mut tx, lease, &outcome)
            .await
            .map_err(TruthError::Store)?;
        self.commit(tx, after_commit, outcome).await
    }

    /// Runs the business code in `tx`: the transaction back, its after-commit hooks, and the
    /// outcome (the output as JSON).
    async fn business(
        &self,
        tx: sqlx::Transaction<'static, T::Database>,
        input: I,
    ) -> Result<Ran<T::Database>, TruthError<B::Error>> {
        let (given, kept) = Tx::split(tx);
        let output = self
            .business
            .run(given, input)
            .await
            .map_err(TruthError::Business)?;
        let body = serde_json::to_vec(&output).map_err(TruthError::Output)?;
        let (tx, after_commit) = kept.into_parts().ok_or(TruthError::Escaped)?;
        Ok((tx, after_commit, Outcome::new(0, Bytes::from(body))))
    }

    /// Commits, then runs the after-commit hooks.
    async fn commit(
        &self,
        tx: sqlx::Transaction<'static, T::Database>,
        after_commit: Vec<AfterCommit>,
        outcome: Outcome,
    ) -> Result<Handled, TruthError<B::Error>> {
        tx.commit().await.map_err(TruthError::Database)?;
        for hook in after_commit {
            hook.await;
        }
        Ok(Handled::Output(outcome.body))
    }

    /// The answer to a copy whose key the record already has (its transaction rolled back).
    async fn found(&self, claim: TxClaim, job: &Job) -> Handled {
        match claim {
            TxClaim::Replay(outcome) => Handled::AlreadyDone(outcome.body),
            TxClaim::InFlight { retry_after } => Handled::InFlight { retry_after },
            // Not an answer of a claim that was not taken; a requeue decides again.
            TxClaim::Execute(_) => Handled::InFlight {
                retry_after: Duration::ZERO,
            },
            TxClaim::Mismatch => {
                tracing::warn!(
                    namespace = self.scope.namespace(),
                    "business key reused with another payload; not run, rejected"
                );
                self.mark_record(&job.key).await;
                Handled::Mismatch
            }
        }
    }
}

impl<T: TxStore, I, B> SqlTruth<T, I, B> {
    /// Marks the record of truth of `key` as having met a conflicting copy
    /// ([`Store::mark_conflict`](idempotency_core::Store::mark_conflict)), under the key the
    /// previous derivation gave it (a transaction's) if that is where it is and previous keys
    /// are read; a failure is logged.
    async fn mark_record(&self, key: &idempotency_core::IdempotencyKey) {
        let storage_key = self.scope.storage_key_for(Mechanism::Message, key.as_str());
        let mut marked = self.store.mark_conflict(&storage_key).await;
        if matches!(marked, Ok(false)) && self.store.reads_previous_keys() {
            let previous = self
                .scope
                .storage_key_for(Mechanism::Transaction, key.as_str());
            marked = self.store.mark_conflict(&previous).await;
        }
        if let Err(error) = marked {
            tracing::warn!(namespace = self.scope.namespace(), record = %storage_key.to_hex(), %error, "the conflict could not be marked on the record of truth");
        }
    }

    /// Logs (ERROR, once) and counts a run for a consumer that does not let this truth decide
    /// when its fast tier cannot: a handler of the user's own wrapping this one without passing
    /// on [`Handler::guards_itself`]. Such a consumer requeues where it should ask the truth.
    fn check_deferred_to(&self) {
        if consumer::defers_to_handler() != Some(false) {
            return;
        }
        metrics::counter!(UNDEFERRED_TRUTH, "namespace" => self.scope.namespace().to_owned())
            .increment(1);
        if !self.warned_undeferred.swap(true, Ordering::Relaxed) {
            tracing::error!(
                namespace = self.scope.namespace(),
                "a SqlTruth runs under a consumer that does not defer to it: a handler wrapping it \
                 does not pass on `guards_itself`, so a fast-tier outage or a dead consumer's claim \
                 requeues instead of asking the truth; build the consumer with `two_tier::TwoTier` \
                 (or pass `guards_itself` on)"
            );
        }
    }
}

impl<T, I, B> Handler for SqlTruth<T, I, B>
where
    T: TxStore,
    I: FromJob,
    B: Business<T::Database, I>,
{
    type Error = TruthError<B::Error>;

    async fn handle(&self, job: Job) -> Result<Handled, Self::Error> {
        self.run(&job).await
    }

    fn guards_itself(&self) -> bool {
        true
    }

    fn record_ttl(&self) -> Option<Duration> {
        Some(self.ttl)
    }

    /// Marks the record of truth: the fast tier found the conflict before this ran.
    async fn mark_conflict(&self, key: &idempotency_core::IdempotencyKey) {
        self.mark_record(key).await;
    }
}
