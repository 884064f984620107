//! Make microservices idempotent: a repeated request produces the same result, and its side
//! effects happen once.
//!
//! This crate is the one dependency a service needs: it re-exports the engine
//! ([`idempotency_core`], at the root), one-time tokens ([`token`]), the SQL stores ([`sql`]),
//! idempotent functions ([`function`]), the HTTP and gRPC layers ([`tower`]), the queue consumers
//! ([`queue`]) and the outbox ([`outbox`]), each behind the feature of its store or source of
//! duplicates.
//!
//! | duplicates from | use | features |
//! |---|---|---|
//! | HTTP retries, payment callbacks | `tower::IdempotencyLayer` | `axum` (+ `redis`, `postgres`, …) |
//! | gRPC timeout retries | the same layer, `.grpc()` | `tonic` |
//! | any `async fn` | `#[idempotent(key = …, store = …)]` | `macros` |
//! | handlers writing to SQL (the iron rule) | `build_transactional()`, `tower::transactional::Tx` | `axum` + `postgres` / `mysql` / `sqlite` |
//! | at-least-once queues | `queue::two_tier::TwoTier`, `queue::rabbitmq`, `queue::nats` | `rabbitmq` or `nats`, + `redis`, `postgres` |
//! | a change in another service's database | `outbox::Outbox`, `outbox::Relay` | `outbox` + `postgres` + a broker |
//! | front-end double submits (only these) | one-time tokens: `token::TokenStore`, `tower::TokenLayer` | `tower` |
//!
//! ```
//! use idempotency::{Idempotency, MemoryStore, Error};
//! # #[cfg(feature = "macros")]
//! use idempotency::idempotent;
//!
//! # #[cfg(feature = "macros")]
//! #[idempotent(key = trade_no, store = engine)]
//! async fn grant_coupon(engine: &Idempotency<MemoryStore>, trade_no: &str) -> Result<u64, Error> {
//!     Ok(42) // runs once per trade_no; a retry gets the stored 42
//! }
//! # #[cfg(feature = "macros")]
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! # let engine = Idempotency::new(MemoryStore::new());
//! # assert_eq!(grant_coupon(&engine, "T1").await.unwrap(), 42);
//! # assert_eq!(grant_coupon(&engine, "T1").await.unwrap(), 42);
//! # }
//! # #[cfg(not(feature = "macros"))] fn main() {}
//! ```
//!
//! The [`guide`] has the rest: what a client sees, the iron rule, queue consumers, the outbox,
//! stores, when the store fails, operations, the defaults and the pitfalls.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use idempotency_core::*;

/// Operations on records (`idempotency-operations`): list and count dangling records, inspect,
/// reconcile, release or complete by hand (fenced and audited), purge with an archive.
pub use idempotency_operations as operations;

/// One-time tokens against double submits (`idempotency-token`): [`token::TokenStore`],
/// [`token::MemoryTokenStore`].
pub use idempotency_token as token;

/// Idempotent functions (`idempotency-function`): the runtime of `#[idempotent]`
/// ([`function::Call`], [`function::run`], [`function::Recorded`]).
#[cfg(feature = "macros")]
pub use idempotency_function as function;

#[cfg(feature = "macros")]
pub use idempotency_function::idempotent;

/// The Redis store (`idempotency-redis`): [`redis::RedisStore`] on one node, a Cluster or
/// Valkey, and [`redis::RedisTokenStore`].
#[cfg(feature = "redis")]
pub use idempotency_redis as redis;

/// The SQL stores (`idempotency-sql`): `PostgresStore`, `MySqlStore`, `SqliteStore`, claims
/// in the caller's transaction ([`sql::TxStore`]), state-machine transitions.
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
pub use idempotency_sql as sql;

/// Runs with steps (`idempotency-steps`): handlers with several steps, each checkpointed on the
/// record (in the business database, or on Redis or the memory store under a lease), resumed by
/// a retry, a takeover or the completer.
#[cfg(feature = "steps")]
pub use idempotency_steps as steps;

/// The HTTP and gRPC layers (`idempotency-tower`): [`tower::IdempotencyLayer`], the
/// transactional layer, one-time tokens, the admin router.
#[cfg(feature = "tower")]
pub use idempotency_tower as tower;

/// Idempotent queue consumers (`idempotency-queue`): RabbitMQ and NATS JetStream, two tiers.
#[cfg(any(feature = "rabbitmq", feature = "nats"))]
pub use idempotency_queue as queue;

/// The transactional outbox (`idempotency-outbox`): its tables ([`outbox::Outbox`]), the relay
/// and its targets.
#[cfg(feature = "outbox")]
pub use idempotency_outbox as outbox;

/// Test support (`idempotency-test`): the store conformance suites, the fault proxy, span
/// capture.
#[cfg(feature = "testing")]
pub use idempotency_test as testing;

pub mod guide;

/// The README's code blocks, compiled and run as doctests so the README stays true.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
