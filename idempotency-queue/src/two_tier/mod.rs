//! Two tiers: a fast-path store answers most duplicates, the SQL record decides execution.
//!
//! The post-mortem's consumer puts a Redis `SET NX` in front and writes its dedup row *after* the
//! business change; after a Redis flush or fail-over two consumers both pass the check and both
//! grant. Here the tiers are split the other way round:
//!
//! - **Tier 1** (any [`Store`](idempotency_core::Store), typically Redis) is the
//!   [`IdempotentConsumer`](crate::IdempotentConsumer)'s engine: a completed key is acked with
//!   one round trip, a key in flight elsewhere is handed to the truth. Keep its TTL longer than the
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
//! Whenever tier 1 cannot answer, the truth does: a key in flight there (perhaps a consumer
//! killed after its commit, whose claim holds until its lease ends) or tier 1 down costs a SQL
//! claim, never a requeue or a second execution ([`Handler::guards_itself`](crate::Handler::guards_itself)).
//!
//! The business code is a plain `async` closure over the transaction ([`Tx`], owned) and what it
//! reads from the message ([`Json`] decodes the payload once; [`Job`](crate::Job) gives it all);
//! what it returns is stored (JSON) as the key's outcome on both tiers.
//!
//! ```no_run
//! # #[cfg(all(feature = "sql", feature = "rabbitmq"))]
//! # async fn demo(pool: sqlx::PgPool, redis: idempotency_core::redis::RedisStore) -> Result<(), Box<dyn std::error::Error>> {
//! use idempotency_core::sql::PostgresStore;
//! use idempotency_core::{Idempotency, Scope};
//! use idempotency_queue::two_tier::{Json, SqlTruth, Tx};
//! use idempotency_queue::{IdempotentConsumer, JsonField};
//! use std::time::Duration;
//!
//! #[derive(serde::Deserialize)]
//! struct Paid { trade_no: String, user_id: i64 }
//!
//! let scope = Scope::new("coupon-grant");
//! let truth = PostgresStore::new(pool).with_table_name("coupon_grant_dedup")?;
//! truth.migrate().await?;
//! let grant = SqlTruth::new(truth, scope.clone(), |tx: Tx<sqlx::Postgres>, Json(paid): Json<Paid>| async move {
//!     sqlx::query_scalar::<_, i64>(
//!         "INSERT INTO coupon_grants (trade_no, user_id) VALUES ($1, $2) RETURNING id",
//!     )
//!     .bind(paid.trade_no)
//!     .bind(paid.user_id)
//!     .fetch_one(&mut *tx.conn().await)
//!     .await
//! });
//! let consumer = IdempotentConsumer::new(
//!     Idempotency::new(redis).with_ttl(Duration::from_secs(48 * 3600)),
//!     scope,
//!     JsonField::new("/trade_no"),
//!     grant,
//! );
//! # let _ = consumer; Ok(()) }
//! ```

mod error;
mod input;
mod truth;
mod tx;

pub use error::TruthError;
pub use input::{FromJob, Json};
pub use truth::{Business, SqlTruth};
pub use tx::{Tx, TxConn};
