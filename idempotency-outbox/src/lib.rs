//! The transactional outbox: messages enqueued in the business transaction ([`Outbox`]), and
//! the relay that delivers them at least once, each with a stable id the receiver dedups on.
//!
//! The post-mortem's second trap: the coupon service has its own database, so the callback
//! service cannot write the coupon, nor a dedup record that answers for it, in its own
//! transaction. The way across is a message: the callback enqueues it in an outbox table **in
//! its business transaction** ([`Outbox`]), a [`Relay`] delivers it
//! once committed, and the coupon service's consumer claims the message id in **its**
//! transaction (`idempotency_queue::two_tier::SqlTruth`), so coupon and dedup record commit
//! together there. Every crash in between either loses nothing that committed or delivers a copy
//! the receiver drops.
//!
//! # Tables and relay
//!
//! The outbox table and its enqueue ([`table`]) sit on `idempotency-sql`, next to its
//! `TxStore`: they are written in the same transaction, with the same schema migrations, on the
//! same three databases. The relay is a long-running loop with broker and HTTP clients (lapin,
//! async-nats, hyper) behind their own features, so a service that only enqueues builds none of
//! them; the relay speaks to the table only through [`OutboxTable`].
//!
//! # Delivery
//!
//! - **At least once**: a message is marked sent only after the [`Target`] confirmed it (a
//!   publisher confirm, a stream's ack). A relay killed in between leaves its batch claimed
//!   until the claim's lease ends; then it is delivered again with the same ids.
//! - **Several relays**: each claims its own batch (`FOR UPDATE SKIP LOCKED` on PostgreSQL,
//!   MySQL 8.0.1+ and MariaDB 10.6+; row locks and the lease on older servers; one writer at a
//!   time on SQLite), so two relays never deliver one message at the same time. A relay renews
//!   its batch's lease while the target delivers, so a slow delivery keeps its batch.
//! - **Retries**: a refused message is due again after a backoff by its failures, and dead
//!   after `max_attempts` (listed by `OutboxTable::dead` for operators, revived by
//!   `OutboxTable::revive`); an unreachable target counts no failure, the relay backs off; a
//!   target that asks to try later (HTTP 409 from a receiver still running the same key, 429,
//!   503) defers the message until its `Retry-After`, uncounted.
//! - **Setup order**: a message whose destination does not exist yet (no queue bound for its
//!   routing key, no stream for its subject, an HTTP 404) is deferred uncounted while it is
//!   younger than [`Relay::with_destination_grace`] (1 h by default), retried every few
//!   seconds, so a relay started before its consumer loses nothing; older, it counts toward
//!   dead. Targets can also declare their destinations
//!   ([`rabbitmq::RabbitMqTarget::declaring_queues`], [`nats::JetStreamTarget::creating_stream`])
//!   or require them at start ([`Relay::try_run`] fails with a [`DestinationError`]).
//! - **Wake-up**: on PostgreSQL the relay `LISTEN`s and the enqueue notifies at commit; it polls
//!   only for retries that come due. On MySQL and SQLite it polls (`with_poll_interval`).
//! - **Ordering** (optional): messages with an aggregate key go out one at a time per aggregate.
//! - **Purging**: sent messages are deleted after `with_retention`, copied first to an archive
//!   table or JSON lines if asked (`with_archive`, as the records' purge; payloads may be
//!   personal data).
//!
//! Targets: [`rabbitmq::RabbitMqTarget`] (feature `rabbitmq`), [`nats::JetStreamTarget`]
//! (feature `nats`), [`http::HttpTarget`] (feature `http`; `https://` with `tls`), or any
//! [`Target`]. Outboxes: features `postgres`, `mysql`, `sqlite`.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod metrics;
mod relay;
// Without a database feature the tables' shared code has no database to run on.
#[cfg_attr(
    not(any(feature = "postgres", feature = "mysql", feature = "sqlite")),
    allow(dead_code, unused_imports)
)]
pub mod table;
mod target;

#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http;
#[cfg(feature = "nats")]
#[cfg_attr(docsrs, doc(cfg(feature = "nats")))]
pub mod nats;
#[cfg(feature = "rabbitmq")]
#[cfg_attr(docsrs, doc(cfg(feature = "rabbitmq")))]
pub mod rabbitmq;

pub use relay::{Relay, Round};
pub use table::{Outbox, OutboxMessage, OutboxTable};
pub use target::{DeliveryError, DestinationError, Target};
