//! [`TwoTier`]: the one way to build a two-tier consumer whose tiers agree.

use std::time::Duration;

use idempotency_core::{Idempotency, Store};
use idempotency_sql::TxStore;

use super::config::{TierConfigError, check_fast_tier};
use super::{Business, FromJob, SqlTruth};
use crate::{IdempotentConsumer, KeyExtractor};

/// The consumer [`TwoTier`] builds: fast tier `S`, keys from `K`, the truth on `T` reading `I`
/// for the business code `B`.
pub type TwoTierConsumer<S, K, T, I, B> = IdempotentConsumer<S, K, SqlTruth<T, I, B>>;

/// Builds the consumer of a [`SqlTruth`]: the truth decides execution, a fast tier (any
/// [`Store`], typically Redis) answers most duplicates in front of it.
///
/// What it settles so that it cannot be got wrong:
/// - the consumer claims in the truth's own [`Scope`](idempotency_core::Scope) (one scope, not
///   two that could differ), and both tiers key a message alike
///   ([`Mechanism::Message`](idempotency_core::Mechanism::Message)): the two records of one
///   message have one storage key, each in its own store. The fast tier must therefore be
///   another store than the truth's table (Redis, memory, another table): on the truth's own
///   table, the fast tier's claim would hold the very key the truth claims;
/// - the consumer always defers to the truth where its fast tier cannot answer (a key in
///   flight, perhaps a dead consumer's claim; the fast tier down): the handler *is* the truth,
///   so no wrapper can forget [`Handler::guards_itself`](crate::Handler::guards_itself); code
///   of your own goes into the business closure, which a closure of yours can wrap, and what
///   must follow the commit into [`Tx::after_commit`](super::Tx::after_commit);
/// - the truth outlives the fast tier and every retry horizon you name
///   ([`retry_horizon`](Self::retry_horizon)), else building fails with a [`TierConfigError`]
///   naming both durations. A fast tier that outlived its truth would vouch for keys whose
///   record is gone: after a flush, a sender's retry would run the work a second time.
///
/// ```
/// use std::time::Duration;
/// use idempotency_core::{Idempotency, MemoryStore, Scope};
/// use idempotency_sql::PostgresStore;
/// use idempotency_queue::JsonField;
/// use idempotency_queue::two_tier::{Json, SqlTruth, TwoTier, Tx};
///
/// #[derive(serde::Deserialize)]
/// struct Paid { trade_no: String }
///
/// # fn demo(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// let truth = SqlTruth::new(
///     PostgresStore::new(pool),
///     Scope::new("coupon-grant"),
///     |tx: Tx<sqlx::Postgres>, Json(paid): Json<Paid>| async move {
///         sqlx::query("INSERT INTO coupons (trade_no) VALUES ($1)")
///             .bind(paid.trade_no)
///             .execute(&mut *tx.conn().await)
///             .await
///             .map(|_| ())
///     },
/// ); // completed records kept 7 days (`SqlTruth::with_ttl`)
/// let fast_tier = Idempotency::new(MemoryStore::new()).with_ttl(Duration::from_secs(48 * 3600));
/// let consumer = TwoTier::new(truth)
///     .retry_horizon(Duration::from_secs(3 * 24 * 3600)) // Stripe retries webhooks for 3 days
///     .consumer(fast_tier, JsonField::new("/trade_no"))?;
/// # let _ = consumer; Ok(()) }
/// ```
#[derive(Debug)]
pub struct TwoTier<T: TxStore, I, B> {
    truth: SqlTruth<T, I, B>,
    retry_horizon: Option<Duration>,
}

impl<T, I, B> TwoTier<T, I, B>
where
    T: TxStore,
    I: FromJob,
    B: Business<T::Database, I>,
{
    /// A two-tier consumer around `truth`.
    pub fn new(truth: SqlTruth<T, I, B>) -> Self {
        Self {
            truth,
            retry_horizon: None,
        }
    }

    /// The longest any sender or broker may deliver the same event again (a gateway's retry
    /// schedule, a stream's retention): building fails if the truth keeps its records for less.
    #[must_use]
    pub fn retry_horizon(mut self, horizon: Duration) -> Self {
        self.retry_horizon = Some(horizon);
        self
    }

    /// The consumer: keys from `extractor`, claimed first in `fast_tier`, decided by the truth.
    /// Refused if the fast tier's TTL plus its lease exceeds the truth's TTL, or the truth's
    /// TTL is shorter than the [`retry_horizon`](Self::retry_horizon).
    pub fn consumer<S: Store, K: KeyExtractor>(
        self,
        fast_tier: Idempotency<S>,
        extractor: K,
    ) -> Result<TwoTierConsumer<S, K, T, I, B>, TierConfigError> {
        self.check_horizon()?;
        check_fast_tier(
            fast_tier.config().ttl,
            fast_tier.config().lease,
            self.truth.ttl(),
        )?;
        let scope = self.truth.scope().clone();
        // The truth guards itself (`Handler::guards_itself`): the consumer defers to it.
        Ok(IdempotentConsumer::new(
            fast_tier, scope, extractor, self.truth,
        ))
    }

    /// The consumer without a fast tier: keys from `extractor`, every delivery decided by the
    /// truth alone, in the business transaction. One SQL transaction per delivery, duplicates
    /// included (a claim that finds the committed record, then a rollback); refused if the
    /// truth's TTL is shorter than the [`retry_horizon`](Self::retry_horizon).
    ///
    /// When a fast tier pays: when duplicates are frequent (gateway retries, redelivery storms
    /// after a consumer restart) and the database is the scarce resource; it answers a
    /// completed key with one round trip to the fast store instead of a transaction. When
    /// duplicates are rare, the fast tier only adds a round trip to every new message and a
    /// second store to run.
    ///
    /// ```
    /// use idempotency_core::Scope;
    /// use idempotency_sql::PostgresStore;
    /// use idempotency_queue::MessageId;
    /// use idempotency_queue::two_tier::{Json, SqlTruth, TwoTier, Tx};
    ///
    /// #[derive(serde::Deserialize)]
    /// struct Paid { trade_no: String }
    ///
    /// # fn demo(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
    /// let grant = |tx: Tx<sqlx::Postgres>, Json(paid): Json<Paid>| async move {
    ///     sqlx::query("INSERT INTO coupons (trade_no) VALUES ($1)")
    ///         .bind(paid.trade_no)
    ///         .execute(&mut *tx.conn().await)
    ///         .await
    ///         .map(|_| ())
    /// };
    /// let consumer = TwoTier::new(SqlTruth::new(PostgresStore::new(pool), Scope::new("coupon-grant"), grant))
    ///     .sql_only(MessageId)?;
    /// # let _ = consumer; Ok(()) }
    /// ```
    pub fn sql_only<K: KeyExtractor>(
        self,
        extractor: K,
    ) -> Result<TwoTierConsumer<T, K, T, I, B>, TierConfigError> {
        self.check_horizon()?;
        let scope = self.truth.scope().clone();
        Ok(IdempotentConsumer::without_fast_tier(
            scope, extractor, self.truth,
        ))
    }

    fn check_horizon(&self) -> Result<(), TierConfigError> {
        match self.retry_horizon {
            Some(horizon) if horizon > self.truth.ttl() => {
                Err(TierConfigError::ShorterThanHorizon {
                    truth_ttl: self.truth.ttl(),
                    horizon,
                })
            }
            _ => Ok(()),
        }
    }
}
