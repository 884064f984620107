//! Idempotent at-least-once queue consumers.
//!
//! Brokers deliver at least once: a consumer crash, a lost ack or a producer retry all deliver
//! the same business event again. [`IdempotentConsumer`] runs the handler once per business key
//! and tells the broker what to do with every delivery:
//!
//! 1. the business key comes from the message ([`KeyExtractor`]: [`MessageId`], [`Header`],
//!    [`JsonField`] or a closure);
//! 2. the key is claimed in an [`idempotency_core::Store`] through the engine;
//! 3. the handler runs; its success is stored, its failure releases the key;
//! 4. the delivery is acked, requeued with a delay, or rejected ([`Verdict::action`]).
//!
//! A duplicate is acked without running the handler; a duplicate of a message still being
//! processed waits for it (up to 5 s, then it is requeued with a delay, never dropped); an
//! unreachable store requeues, never runs the handler unguarded.
//!
//! A rejected delivery (no business key, or the key reused with another payload) is never
//! silently dropped: the broker adapters' consumers require a `DeadLetters` destination,
//! republish the message there with the reason in a header
//! ([`dead_letter::REASON_HEADER`]), and settle the original only once the broker confirmed the
//! copy (requeued otherwise); counted in [`DEAD_LETTERS`].
//!
//! Broker adapters: `rabbitmq` (feature `rabbitmq`, lapin) and `nats` (feature `nats`,
//! async-nats JetStream), each with one builder to run a consumer: `rabbitmq::serve(&consumer,
//! deliveries, &dead_letters)` or `nats::serve_pull(&consumer, &pull, &dead_letters)`, then
//! `.concurrency(n)`, `.with_graceful_shutdown(signal)` and `.await` (reconnecting:
//! `serve_reconnecting`). Two tiers (feature `sql`): `two_tier::SqlTruth` makes the SQL dedup
//! record, written in the business transaction, the one that decides execution, with a Redis
//! (or any) store in front as the fast path.
//!
//! ```
//! use idempotency_core::{Idempotency, MemoryStore, Scope};
//! use idempotency_queue::{Action, IdempotentConsumer, Job, JsonField, Message};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let consumer = IdempotentConsumer::new(
//!     Idempotency::new(MemoryStore::new()),
//!     Scope::new("coupon-grant"),
//!     JsonField::new("/trade_no"),
//!     |job: Job| async move { Ok::<_, std::convert::Infallible>(()) },
//! );
//! let delivery = Message::new(r#"{"trade_no":"T1","user":7}"#);
//! for _ in 0..6 {
//!     assert_eq!(consumer.process(delivery.clone()).await.action(), Action::Ack);
//! }
//! assert_eq!(consumer.stats().snapshot().processed, 1);
//! assert_eq!(consumer.stats().snapshot().replayed, 5);
//! # }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod backoff;
mod consumer;
pub mod dead_letter;
mod extract;
mod fast_tier;
mod fingerprint;
mod handler;
mod message;
#[cfg(any(feature = "rabbitmq", feature = "nats"))]
mod reconnect;
#[cfg(any(feature = "rabbitmq", feature = "nats"))]
mod serve;
mod stats;
#[cfg(feature = "steps")]
#[cfg_attr(docsrs, doc(cfg(feature = "steps")))]
pub mod steps;
#[cfg(any(feature = "rabbitmq", feature = "nats"))]
mod stop;
mod verdict;

#[cfg(feature = "nats")]
#[cfg_attr(docsrs, doc(cfg(feature = "nats")))]
pub mod nats;
#[cfg(feature = "rabbitmq")]
#[cfg_attr(docsrs, doc(cfg(feature = "rabbitmq")))]
pub mod rabbitmq;
#[cfg(feature = "sql")]
#[cfg_attr(docsrs, doc(cfg(feature = "sql")))]
pub mod two_tier;

pub use backoff::Backoff;
pub use consumer::{DEFAULT_MAX_DELIVERIES, DELIVERIES, IdempotentConsumer};
pub use dead_letter::DEAD_LETTERS;
pub use extract::{Header, JsonField, KeyExtractor, MessageId};
pub use fingerprint::{CONFLICTS, OnConflict};
pub use handler::{Handled, Handler};
pub use message::{Job, Message};
#[cfg(any(feature = "rabbitmq", feature = "nats"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "rabbitmq", feature = "nats"))))]
pub use serve::{DEFAULT_CONCURRENCY, ServeFuture};
pub use stats::{Stats, StatsSnapshot};
pub use verdict::{Action, RejectReason, Verdict};
