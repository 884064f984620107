//! The SQL tier: dedup record and business writes in one transaction.

use std::fmt;

use futures_util::future::BoxFuture;
use idempotency_core::sql::{TxClaim, TxStore};
use idempotency_core::{Outcome, Scope};

use super::TruthError;
use crate::{Handled, Handler, Job};

/// The transaction a [`SqlTruth`] runs its business code in.
pub type Transaction<T> = sqlx::Transaction<'static, <T as TxStore>::Database>;

/// The business code of a [`SqlTruth`], writing through the transaction it is given.
///
/// Every `Fn(&mut Transaction<T>, &Job) -> BoxFuture<Result<(), E>>` closure is one, so a
/// function can name what it returns:
///
/// ```
/// use idempotency_core::Scope;
/// use idempotency_core::sql::PostgresStore;
/// use idempotency_queue::Job;
/// use idempotency_queue::two_tier::{Business, SqlTruth};
///
/// fn coupon_grant(
///     pool: sqlx::PgPool,
/// ) -> SqlTruth<PostgresStore, impl Business<PostgresStore, Error = sqlx::Error>> {
///     let store = PostgresStore::new(pool.clone());
///     SqlTruth::new(store, pool, Scope::new("coupon-grant"), |tx, job: &Job| {
///         Box::pin(async move {
///             sqlx::query("INSERT INTO coupons (trade_no) VALUES ($1)")
///                 .bind(job.key.as_str())
///                 .execute(&mut **tx)
///                 .await
///                 .map(drop)
///         })
///     })
/// }
/// ```
pub trait Business<T: TxStore>: Send + Sync + 'static {
    /// Why the business code failed.
    type Error: fmt::Display + Send + 'static;

    /// Runs the business code for `job` in `tx`.
    fn run<'c>(
        &'c self,
        tx: &'c mut Transaction<T>,
        job: &'c Job,
    ) -> BoxFuture<'c, Result<(), Self::Error>>;
}

impl<T, F, E> Business<T> for F
where
    T: TxStore,
    F: for<'c> Fn(&'c mut Transaction<T>, &'c Job) -> BoxFuture<'c, Result<(), E>>
        + Send
        + Sync
        + 'static,
    E: fmt::Display + Send + 'static,
{
    type Error = E;

    fn run<'c>(&'c self, tx: &'c mut Transaction<T>, job: &'c Job) -> BoxFuture<'c, Result<(), E>> {
        self(tx, job)
    }
}

/// A [`Handler`] that runs `business` inside a transaction which first claims the job's key
/// in `store` ([`TxStore::claim_in_tx`]) and completes it before committing.
///
/// | SQL claim | what happens |
/// |---|---|
/// | `Execute` | `business(tx, job)`, the record completed, one commit → [`Handled::Done`] |
/// | `Replay` (committed before) | rollback, nothing runs → [`Handled::AlreadyDone`] |
/// | `Mismatch` (key used with another payload) | rollback, nothing runs, logged → [`Handled::Mismatch`] (rejected) |
/// | `InFlight` (another transaction still holds the key after the store's in-flight wait, 5 s by default) | rollback → [`Handled::InFlight`] (requeued) |
///
/// The record keeps [`Job::fingerprint`], the consumer's fingerprint of the message, so both
/// tiers compare payloads the same way.
///
/// A business error, a panic, or a crash before commit rolls everything back. The business code
/// must write through `tx` only: writes elsewhere are outside the guarantee.
pub struct SqlTruth<T: TxStore, F> {
    store: T,
    pool: sqlx::Pool<T::Database>,
    scope: Scope,
    business: F,
}

impl<T: TxStore, F> fmt::Debug for SqlTruth<T, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlTruth")
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl<T, F, E> SqlTruth<T, F>
where
    T: TxStore,
    F: for<'c> Fn(&'c mut Transaction<T>, &'c Job) -> BoxFuture<'c, Result<(), E>>
        + Send
        + Sync
        + 'static,
    E: fmt::Display + Send + 'static,
{
    /// Guards `business` with dedup records of `store` (in the same database as `pool`, so the
    /// record and the business writes share the transaction) in `scope`.
    pub fn new(store: T, pool: sqlx::Pool<T::Database>, scope: Scope, business: F) -> Self {
        Self {
            store,
            pool,
            scope,
            business,
        }
    }
}

impl<T: TxStore, B: Business<T>> SqlTruth<T, B> {
    /// The dedup store.
    pub fn store(&self) -> &T {
        &self.store
    }

    /// Runs the job: claim, business, complete, commit.
    pub async fn run(&self, job: &Job) -> Result<Handled, TruthError<B::Error>> {
        let mut tx = self.pool.begin().await.map_err(TruthError::Database)?;
        let claim = self
            .store
            .claim_in_tx(&mut tx, &self.scope, &job.key, &job.fingerprint)
            .await
            .map_err(TruthError::Store)?;
        let lease = match claim {
            TxClaim::Execute(lease) => lease,
            TxClaim::Replay(_) => return Ok(Handled::AlreadyDone),
            TxClaim::Mismatch => {
                tracing::warn!(
                    namespace = self.scope.namespace(),
                    "business key reused with another payload; not run, rejected"
                );
                return Ok(Handled::Mismatch);
            }
            TxClaim::InFlight { retry_after } => return Ok(Handled::InFlight { retry_after }),
        };
        self.business
            .run(&mut tx, job)
            .await
            .map_err(TruthError::Business)?;
        self.store
            .complete_in_tx(&mut tx, lease, &Outcome::new(0, ""))
            .await
            .map_err(TruthError::Store)?;
        tx.commit().await.map_err(TruthError::Database)?;
        Ok(Handled::Done)
    }
}

impl<T: TxStore, B: Business<T>> Handler for SqlTruth<T, B> {
    type Error = TruthError<B::Error>;

    async fn handle(&self, job: Job) -> Result<Handled, Self::Error> {
        self.run(&job).await
    }

    fn guards_itself(&self) -> bool {
        true
    }
}
