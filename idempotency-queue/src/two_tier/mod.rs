//! Two tiers: a fast-path store answers most duplicates, the SQL record decides execution.
//!
//! The post-mortem's consumer puts a Redis `SET NX` in front and writes its dedup row *after* the
//! business change, outside its transaction; after a Redis flush or fail-over two consumers both
//! pass the check and both grant. Here the record and the business writes share a transaction:
//!
//! - **Tier 1** (any [`Store`](idempotency_core::Store), typically Redis) is the
//!   [`IdempotentConsumer`](crate::IdempotentConsumer)'s engine: a completed key is acked with
//!   one round trip, a key in flight elsewhere is handed to the truth.
//! - **Tier 2** ([`SqlTruth`], the handler) writes the key's record **in the same transaction
//!   as the business writes** and commits both together. A first copy writes it last, completed
//!   ([`TxStore::record_in_tx`](idempotency_sql::TxStore::record_in_tx), the post-mortem's
//!   order and cost); any other copy claims it first. It alone decides whether the business
//!   writes commit: of two copies that both ran, the record's unique key commits one.
//!
//! A tier-1 miss (flushed, failed over, expired) therefore costs one SQL claim that finds the
//! committed record ([`Verdict::AlreadyDone`](crate::Verdict::AlreadyDone)), never a second
//! execution; a crash anywhere leaves either nothing (rolled back) or the business writes
//! *with* their record. Whenever tier 1 cannot answer, the truth does: a key in flight there
//! (perhaps a consumer killed after its commit, whose claim holds until its lease ends) or
//! tier 1 down costs a SQL claim, never a requeue or a second execution.
//!
//! **Lifetimes.** The truth must remember a key for as long as anyone may deliver it again,
//! and longer than tier 1 vouches for it:
//!
//! | what | default | |
//! |---|---|---|
//! | truth (SQL) TTL | 7 days ([`DEFAULT_TRUTH_TTL`], [`SqlTruth::with_ttl`]) | covers Alipay's ~25 h of notifications, Stripe's 3 days of webhook retries |
//! | fast tier TTL | the engine's (24 h by default, `Idempotency::with_ttl`) | must end, with its lease, before the truth's |
//! | retry horizon | none ([`TwoTier::retry_horizon`]) | the truth must outlive it |
//!
//! [`TwoTier`] builds the consumer and refuses a configuration where the truth would be
//! forgotten first ([`TierConfigError`]); it also makes the consumer defer to the truth always
//! (no wrapper of yours stands between them to forget
//! [`Handler::guards_itself`](crate::Handler::guards_itself); a `SqlTruth` run by a consumer
//! that does not defer to it logs an ERROR and counts [`UNDEFERRED_TRUTH`]). A purge of the
//! truth's table (`purge_expired`, `spawn_sweeper`) deletes a record only once its own TTL
//! has passed.
//!
//! The business code is a plain `async` closure over the transaction ([`Tx`], owned) and what it
//! reads from the message ([`Json`] decodes the payload once; [`Job`](crate::Job) gives it all);
//! what it returns is stored (JSON) as the key's outcome on both tiers.
//!
//! ```no_run
//! # #[cfg(all(feature = "sql", feature = "rabbitmq"))]
//! # async fn demo(pool: sqlx::PgPool, redis: idempotency_redis::RedisStore) -> Result<(), Box<dyn std::error::Error>> {
//! use idempotency_sql::PostgresStore;
//! use idempotency_core::{Idempotency, Scope};
//! use idempotency_queue::two_tier::{Json, SqlTruth, TwoTier, Tx};
//! use idempotency_queue::JsonField;
//! use std::time::Duration;
//!
//! #[derive(serde::Deserialize)]
//! struct Paid { trade_no: String, user_id: i64 }
//!
//! let truth = PostgresStore::new(pool).with_table_name("coupon_grant_dedup")?;
//! truth.migrate().await?;
//! let grant = SqlTruth::new(truth, Scope::new("coupon-grant"), |tx: Tx<sqlx::Postgres>, Json(paid): Json<Paid>| async move {
//!     sqlx::query_scalar::<_, i64>(
//!         "INSERT INTO coupon_grants (trade_no, user_id) VALUES ($1, $2) RETURNING id",
//!     )
//!     .bind(paid.trade_no)
//!     .bind(paid.user_id)
//!     .fetch_one(&mut *tx.conn().await)
//!     .await
//! });
//! let consumer = TwoTier::new(grant)
//!     .retry_horizon(Duration::from_secs(3 * 24 * 3600))
//!     .consumer(
//!         Idempotency::new(redis).with_ttl(Duration::from_secs(48 * 3600)),
//!         JsonField::new("/trade_no"),
//!     )?;
//! # let _ = consumer; Ok(()) }
//! ```

mod builder;
mod config;
mod error;
mod input;
mod truth;
mod tx;

pub use builder::{TwoTier, TwoTierConsumer};
pub use config::TierConfigError;
pub(crate) use config::check_fast_tier;
pub use error::TruthError;
pub use input::{FromJob, Json};
pub use truth::{Business, DEFAULT_TRUTH_TTL, SqlTruth, UNDEFERRED_TRUTH};
pub use tx::{Tx, TxConn};
