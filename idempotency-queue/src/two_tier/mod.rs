//! Two tiers: a fast-path store answers most duplicates, the SQL record decides execution.
//!
//! The post-mortem's consumer puts a Redis `SET NX` in front and writes its dedup row *after* the
//! business change; after a Redis flush or fail-over two consumers both pass the check and both
//! grant. Here the tiers are split the other way round:
//!
//! - **Tier 1** (any [`Store`](idempotency_core::Store), typically Redis) is the
//!   [`IdempotentConsumer`](crate::IdempotentConsumer)'s engine: a completed key is acked with
//!   one round trip, a key in flight elsewhere is requeued. Keep its TTL longer than the
//!   broker's redelivery window.
//! - **Tier 2** ([`SqlTruth`], the handler) claims the key with
//!   [`TxStore::claim_in_tx`](idempotency_core::sql::TxStore::claim_in_tx) **in the same
//!   transaction as the business writes** and commits both together. It alone decides whether
//!   the business code runs.
//!
//! A tier-1 miss (flushed, failed over, expired) therefore costs one SQL claim that finds the
//! committed record ([`Verdict::AlreadyDone`](crate::Verdict::AlreadyDone)), never a second
//! execution; a crash anywhere leaves either nothing (rolled back) or the business writes
//! *with* their record. With
//! [`with_guarded_handler(true)`](crate::IdempotentConsumer::with_guarded_handler) an outage of
//! tier 1 costs queries too instead of requeues.
//!
//! ```no_run
//! # #[cfg(all(feature = "sql", feature = "rabbitmq"))]
//! # async fn demo(pool: sqlx::PgPool, redis: idempotency_core::redis::RedisStore) -> Result<(), Box<dyn std::error::Error>> {
//! use idempotency_core::sql::PostgresStore;
//! use idempotency_core::{Idempotency, Scope};
//! use idempotency_queue::two_tier::SqlTruth;
//! use idempotency_queue::{Header, IdempotentConsumer, Job};
//! use std::time::Duration;
//!
//! let scope = Scope::new("coupon-grant");
//! let truth = PostgresStore::new(pool.clone());
//! truth.migrate().await?;
//! let grant = SqlTruth::new(truth, pool, scope.clone(), |tx, job: &Job| {
//!     Box::pin(async move {
//!         sqlx::query("INSERT INTO coupons (trade_no) VALUES ($1)")
//!             .bind(job.key.as_str())
//!             .execute(&mut **tx)
//!             .await
//!             .map(drop)
//!     })
//! });
//! let consumer = IdempotentConsumer::new(
//!     Idempotency::new(redis).with_ttl(Duration::from_secs(48 * 3600)),
//!     scope,
//!     Header::new("business-key"),
//!     grant,
//! )
//! .with_guarded_handler(true);
//! # let _ = consumer; Ok(()) }
//! ```

mod error;
mod truth;

pub use error::TruthError;
pub use truth::{Business, SqlTruth, Transaction};
