//! The SQL tier: dedup record and business writes in one transaction.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;

use bytes::Bytes;
use idempotency_core::sql::{TxClaim, TxStore};
use idempotency_core::{Outcome, Scope};
use serde::Serialize;

use super::{FromJob, TruthError, Tx};
use crate::{Handled, Handler, Job};

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

/// A [`Handler`] that runs `business` inside a transaction which first claims the job's key
/// in `store` ([`TxStore::claim_in_tx`]), then stores what it produced as the key's outcome
/// and commits both together.
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
/// must write through its [`Tx`] only: writes elsewhere are outside the guarantee.
///
/// ```
/// use idempotency_core::Scope;
/// use idempotency_core::sql::PostgresStore;
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
    business: B,
    input: PhantomData<fn() -> I>,
}

impl<T: TxStore, I, B> fmt::Debug for SqlTruth<T, I, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlTruth")
            .field("scope", &self.scope)
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
    /// share the transaction, in the same database.
    pub fn new(store: T, scope: Scope, business: B) -> Self {
        Self {
            store,
            scope,
            business,
            input: PhantomData,
        }
    }

    /// The dedup store.
    pub fn store(&self) -> &T {
        &self.store
    }

    /// Runs the job: claim, business, outcome, commit.
    pub async fn run(&self, job: &Job) -> Result<Handled, TruthError<B::Error>> {
        let input = match I::from_job(job) {
            Ok(input) => input,
            Err(reason) => return Ok(Handled::Invalid(reason)),
        };
        let mut tx = self.store.begin().await.map_err(TruthError::Store)?;
        let claim = self
            .store
            .claim_in_tx(&mut tx, &self.scope, &job.key, &job.fingerprint)
            .await
            .map_err(TruthError::Store)?;
        let lease = match claim {
            TxClaim::Execute(lease) => lease,
            TxClaim::Replay(outcome) => return Ok(Handled::AlreadyDone(outcome.body)),
            TxClaim::Mismatch => {
                tracing::warn!(
                    namespace = self.scope.namespace(),
                    "business key reused with another payload; not run, rejected"
                );
                return Ok(Handled::Mismatch);
            }
            TxClaim::InFlight { retry_after } => return Ok(Handled::InFlight { retry_after }),
        };
        let (given, kept) = Tx::split(tx);
        let body = {
            let output = self
                .business
                .run(given, input)
                .await
                .map_err(TruthError::Business)?;
            serde_json::to_vec(&output).map_err(TruthError::Output)?
        };
        let mut tx = kept.into_transaction().ok_or(TruthError::Escaped)?;
        let outcome = Outcome::new(0, Bytes::from(body));
        self.store
            .complete_in_tx(&mut tx, lease, &outcome)
            .await
            .map_err(TruthError::Store)?;
        tx.commit().await.map_err(TruthError::Database)?;
        Ok(Handled::Output(outcome.body))
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
}
