//! NATS JetStream through [`async_nats`].
//!
//! [`serve_pull`] drives a pull consumer's messages, and [`serve`] any stream of JetStream
//! messages (a pull consumer's `messages()`, or a push consumer's), through an
//! [`IdempotentConsumer`](crate::IdempotentConsumer): each is converted with [`message`]
//! (payload, `Nats-Msg-Id`, headers, subject, delivery count), then settled with [`settle`]:
//! `+ACK`, or `-NAK` with the verdict's delay (the server redelivers it then). A rejected
//! message (no business key, or the key reused with another payload) goes to the
//! [`DeadLetters`] every consumer is given: published through JetStream, with the reason in a
//! header, to a dead-letter subject a stream stores, then terminated (`+TERM`); `-NAK`ed if no
//! stream acknowledged the copy. It is never silently dropped: the only way to consume without
//! a dead-letter destination is to say so, [`DeadLetters::drop_and_log`].
//!
//! [`serve_reconnecting`] pulls again whenever the messages fail. All three return a [`Serve`]
//! builder: how many messages at a time ([`Serve::concurrency`]), how often a running one is
//! marked in progress ([`Serve::progress_every`]), and a graceful stop
//! ([`Serve::with_graceful_shutdown`], SIGTERM): no new message starts, the ones in hand finish
//! and are acked, then it returns.
//!
//! Use explicit acks (`AckPolicy::Explicit`) and a `max_deliver` to bound poison messages.
//! While a handler runs, its message is marked in progress (`+WPI`) every third of the pull
//! consumer's `ack_wait` ([`serve_pull`], [`serve_reconnecting`]), or every
//! [`DEFAULT_PROGRESS_INTERVAL`] ([`serve`], made for the default `ack_wait` of 30 s), so
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
//! nats::serve_pull(&consumer, &pull, &dead_letters).concurrency(16).await?;
//! # Ok(()) }
//! ```

mod consume;
mod convert;
mod dead_letters;
mod progress;
mod pull;
mod serve;
mod settle;

pub use convert::message;
pub use dead_letters::{DEFAULT_RETRY_AFTER, DeadLetters};
pub use progress::{DEFAULT_ACK_WAIT, DEFAULT_PROGRESS_INTERVAL, progress_interval};
pub use serve::{Serve, serve, serve_pull, serve_reconnecting};
pub use settle::settle;
