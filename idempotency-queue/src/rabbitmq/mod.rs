//! RabbitMQ (AMQP 0-9-1) through [`lapin`].
//!
//! [`serve`] drives a `lapin::Consumer` through an [`IdempotentConsumer`](crate::IdempotentConsumer):
//! every delivery is converted with [`message`] (payload, `message-id`, text headers,
//! `redelivered`, and the delivery count of quorum queues), processed, then settled with
//! [`settle`]: ack, or `basic.nack` with `requeue = true` after the verdict's delay. A rejected
//! delivery (no business key, or the key reused with another payload) goes to the
//! [`DeadLetters`] every consumer is given: republished, with the reason in a header, to a
//! dead-letter exchange under publisher confirms, then acked; requeued if the copy could not be
//! stored. It is never silently dropped: the only way to consume without a dead-letter
//! destination is to say so, [`DeadLetters::drop_and_log`].
//!
//! A delivery whose handler failed is redelivered *counted*, so that
//! [`IdempotentConsumer::with_max_deliveries`](crate::IdempotentConsumer::with_max_deliveries)
//! (10 by default) dead-letters a poison message on any queue type: after the verdict's delay a
//! copy is published to the queue under publisher confirms (on the [`DeadLetters`] channel) with
//! [`REDELIVERIES_HEADER`], and the original acked once the copy is confirmed (requeued with
//! `basic.nack` if it is not, or with [`DeadLetters::drop_and_log`]). Classic queues count
//! nothing themselves; quorum queues' [`DELIVERY_COUNT_HEADER`] is read too.
//!
//! [`serve_reconnecting`] does the same across broker outages: it connects again (its `open`)
//! whenever the connection fails. Both return a [`Serve`] builder: how many deliveries at a time
//! ([`Serve::concurrency`]), and a graceful stop ([`Serve::with_graceful_shutdown`], SIGTERM): no
//! new delivery starts, the ones in hand finish and are acked, then it returns.
//!
//! Consume with manual acks (`no_ack = false`, the default) and a prefetch (`basic_qos`) of at
//! least the concurrency, so a message waiting for its delayed requeue does not stall the rest.
//!
//! RabbitMQ has no "still working" signal: a delivery left unacknowledged longer than the
//! broker's `consumer_timeout` (30 min by default) closes its channel, and every unacked
//! message on it is redelivered. The store keeps those copies from running twice (requeued as
//! in flight while the first run holds its lease), but keep handlers well under that timeout.
//!
//! ```no_run
//! use idempotency_core::{Idempotency, MemoryStore, Scope};
//! use idempotency_queue::{Header, IdempotentConsumer, Job, rabbitmq};
//! use lapin::{Connection, ConnectionProperties, options::*, types::FieldTable};
//!
//! # async fn run() -> Result<(), lapin::Error> {
//! let connection = Connection::connect("amqp://guest:guest@127.0.0.1:5672", ConnectionProperties::default()).await?;
//! let channel = connection.create_channel().await?;
//! channel.basic_qos(32, BasicQosOptions::default()).await?;
//! channel.queue_declare("coupon.grant".into(), QueueDeclareOptions::durable(), FieldTable::default()).await?;
//! // Exchange and queue "coupon.grant.dead", on a channel of its own in confirm mode.
//! let dead_letters = rabbitmq::DeadLetters::declare(&connection, "coupon.grant").await?;
//! let deliveries = channel
//!     .basic_consume("coupon.grant".into(), "coupon-granter".into(), BasicConsumeOptions::default(), FieldTable::default())
//!     .await?;
//! let consumer = IdempotentConsumer::new(
//!     Idempotency::new(MemoryStore::new()),
//!     Scope::new("coupon-grant"),
//!     Header::new("business-key"),
//!     |job: Job| async move { Ok::<_, std::io::Error>(()) },
//! );
//! rabbitmq::serve(&consumer, deliveries, &dead_letters).concurrency(16).await
//! # }
//! ```

mod consume;
mod convert;
mod dead_letters;
mod redeliver;
mod serve;
mod session;
mod settle;

pub use convert::{DELIVERY_COUNT_HEADER, REDELIVERIES_HEADER, message};
pub use dead_letters::{DEFAULT_RETRY_AFTER, DeadLetters, dead_letter_name};
pub use serve::{Serve, serve, serve_reconnecting};
pub use session::Session;
pub use settle::settle;
