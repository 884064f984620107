//! NATS JetStream through [`async_nats`].
//!
//! [`consume_pull`] drives a pull consumer's messages, and [`consume`] any stream of JetStream
//! messages (a pull consumer's `messages()`, or a push consumer's), through an
//! [`IdempotentConsumer`](crate::IdempotentConsumer): each is converted with [`message`]
//! (payload, `Nats-Msg-Id`, headers, subject, delivery count), then settled with [`settle`]:
//! `+ACK`, or `-NAK` with the verdict's delay (the server redelivers it then). A rejected
//! message (no business key, or the key reused with another payload) goes to the
//! [`DeadLetters`] every consume function requires: published through JetStream, with the
//! reason in a header, to a dead-letter subject a stream stores, then terminated (`+TERM`);
//! `-NAK`ed if no stream acknowledged the copy. It is never silently dropped: the only way to
//! consume without a dead-letter destination is to say so, [`DeadLetters::drop_and_log`].
//!
//! Use explicit acks (`AckPolicy::Explicit`) and a `max_deliver` to bound poison messages.
//! While a handler runs, its message is marked in progress (`+WPI`) every third of the pull
//! consumer's `ack_wait` ([`consume_pull`]), every [`DEFAULT_PROGRESS_INTERVAL`] ([`consume`],
//! made for the default `ack_wait` of 30 s) or at [`consume_with_progress`]'s interval, so
//! JetStream does not redeliver it meanwhile.
//!
//! JetStream drops a republished message whose `Nats-Msg-Id` it saw within the stream's
//! duplicate window; that covers producer retries within the window only. This consumer
//! covers everything else (redeliveries, retries outside the window, other ids for the same
//! business key).
//!
//! ```no_run
//! use idempotency_core::{Idempotency, MemoryStore, Scope};
//! use idempotency_queue::{Header, IdempotentConsumer, Job, nats};
//! use async_nats::jetstream::{self, consumer::pull};
//!
//! # async fn run() -> Result<(), async_nats::Error> {
//! let client = async_nats::connect("nats://127.0.0.1:4222").await?;
//! let stream = jetstream::new(client.clone())
//!     .get_or_create_stream(jetstream::stream::Config {
//!         name: "COUPONS".into(),
//!         subjects: vec!["coupon.grant".into()],
//!         ..Default::default()
//!     })
//!     .await?;
//! // A stream of its own for the dead letters, outside the source stream's subjects.
//! let dead_letters = nats::DeadLetters::declare(
//!     jetstream::new(client.clone()), "COUPONS-DEAD", "dead.coupon.grant",
//! ).await?;
//! let pull = stream
//!     .get_or_create_consumer("granter", pull::Config { durable_name: Some("granter".into()), ..Default::default() })
//!     .await?;
//! let consumer = IdempotentConsumer::new(
//!     Idempotency::new(MemoryStore::new()),
//!     Scope::new("coupon-grant"),
//!     Header::new("business-key"),
//!     |job: Job| async move { Ok::<_, std::io::Error>(()) },
//! );
//! nats::consume_pull(&consumer, &pull, &dead_letters, 16).await?;
//! # Ok(()) }
//! ```

mod consume;
mod convert;
mod dead_letters;
mod settle;

pub use consume::{
    DEFAULT_ACK_WAIT, DEFAULT_PROGRESS_INTERVAL, consume, consume_pull, consume_pull_reconnecting,
    consume_pull_reconnecting_until, consume_with_progress, progress_interval,
};
pub use convert::message;
pub use dead_letters::{DEFAULT_RETRY_AFTER, DeadLetters};
pub use settle::settle;
