//! The outbox's tables: messages enqueued in the business transaction, delivered by the relay.
//!
//! A dedup record cannot be atomic with a write in another service's database, nor with a
//! publish to a broker. The outbox closes that gap on the sending side: the message is a row
//! written **in the same transaction** as the business change (and the dedup record of
//! [`TxStore`](idempotency_sql::TxStore) or transactional HTTP), so it exists exactly when the change
//! committed. A [`Relay`](crate::Relay) then delivers committed messages at least
//! once and marks them sent; the receiving service's consumer claims the message's id in its own
//! transaction, so its effect and its dedup record commit together there.
//!
//! - **Message id**: stable, derived from the scope and the business key
//!   ([`OutboxMessage::new`]), so every redelivery and every re-enqueue of one business event
//!   carries the same id: the idempotency key downstream (AMQP `message-id`, `Nats-Msg-Id`,
//!   `Idempotency-Key`). The table refuses a second message with one id (the enqueue answers
//!   `false`), but the first line is the caller's: enqueue only when the state transition or the
//!   claim applied, so a duplicate callback enqueues nothing.
//! - **Business key in the clear**: a row holds its business key and payload as the message
//!   carries them, until the relay purges it after the retention (the archive keeps what it
//!   is given). Idempotency records never hold raw keys; the outbox is the message on its way.
//!   Operators find a message, and the receiver's record, from the business key by deriving
//!   the id ([`message_id`]; `idempotency trace`), so nothing depends on the row being there.
//! - **States**: `pending` (due at `available_at`), `sent`, `dead` (refused `max_attempts`
//!   times; listed by [`OutboxTable::dead`] for operators, re-armed by [`OutboxTable::revive`]).
//! - **Claiming**: a relay claims a batch by setting a fresh claim token and a lease (the row's
//!   `available_at` moves to the lease's end), so a relay that dies mid-batch loses its claim
//!   when the lease ends and another relay delivers the batch again (at least once). How
//!   concurrent relays pick disjoint batches:
//!
//!   | database | picking a batch | wake-up |
//!   |---|---|---|
//!   | PostgreSQL | `FOR UPDATE SKIP LOCKED`, one statement | `LISTEN`/`NOTIFY` |
//!   | MySQL 8.0.1+, MariaDB 10.6+ | `FOR UPDATE SKIP LOCKED`, then the lease | polling |
//!   | older MySQL/MariaDB | `FOR UPDATE` (relays wait for each other's short claim), then the lease | polling |
//!   | SQLite | one writer at a time, one statement | polling |
//!
//! - **Ordering** (optional): messages with an aggregate key are claimed one at a time per
//!   aggregate, oldest first; a later message waits until every earlier one of its aggregate is
//!   sent (a dead one blocks its aggregate until revived: order is kept, not skipped).
//! - **On a transition**: `Outbox::enqueue_if_applied` applies a
//!   [`Transition`](idempotency_sql::Transition) and enqueues its message only if it applied, in one call
//!   inside the caller's transaction (PostgreSQL, MySQL/MariaDB, SQLite).
//! - **Wake-up**: on PostgreSQL the enqueue notifies the channel named like the table
//!   (`pg_notify`, delivered at commit) and the relay `LISTEN`s on it
//!   ([`OutboxTable::listen`]), so it does not poll. Times are the database's clock, except on
//!   SQLite (the host's, as its store).
//!
//! ```no_run
//! # #[cfg(feature = "postgres")]
//! # async fn demo(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! use idempotency_outbox::{Outbox, OutboxMessage};
//! use idempotency_core::{IdempotencyKey, Scope};
//!
//! let outbox = Outbox::postgres(pool.clone());
//! outbox.migrate().await?;
//! let trade = IdempotencyKey::parse("T1")?;
//! let mut tx = pool.begin().await?;
//! let paid = sqlx::query("UPDATE orders SET state = 'paid' WHERE trade_no = $1 AND state = 'pending'")
//!     .bind(trade.as_str())
//!     .execute(&mut *tx)
//!     .await?;
//! if paid.rows_affected() == 1 {
//!     // The side effect hangs off the transition: a duplicate callback enqueues nothing.
//!     let grant = OutboxMessage::new(&Scope::new("coupon.grant"), &trade, "coupon.grant", br#"{"trade_no":"T1"}"#.to_vec());
//!     outbox.enqueue(&mut tx, &grant).await?;
//! }
//! tx.commit().await?;
//! # Ok(()) }
//! ```

#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
mod lookup;
#[cfg(feature = "mysql")]
mod mysql;
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
mod on_transition;
#[cfg(feature = "postgres")]
mod postgres;
mod rows;
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
mod setup;
mod shared;
#[cfg(feature = "sqlite")]
mod sqlite;
mod statements;

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use idempotency_core::{IdempotencyKey, Scope, StoreError};
pub use idempotency_operations::Archive;
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
use idempotency_sql::validate_identifier;
pub(crate) use statements::OutboxSql;

/// The default outbox table.
pub const DEFAULT_OUTBOX_TABLE: &str = "idempotency_outbox";

/// The domain tag of message ids ([`Scope::derive`]).
const MESSAGE_ID_TAG: &[u8] = b"outbox";

/// One message to enqueue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboxMessage {
    /// The stable id, 64 hex characters: the delivery's idempotency key downstream.
    pub id: String,
    /// Where the relay sends it: an AMQP routing key, a NATS subject, an HTTP path.
    pub topic: String,
    /// The business key it was derived from. Part of the message, like the payload: stored in
    /// the clear in the outbox row (and its archive) until purged, and delivered in the
    /// `business-key` header, so operators and receivers see it. Unlike idempotency records,
    /// which keep only a digest, the outbox is a queue of messages for another service.
    pub key: String,
    /// The ordering key: messages of one aggregate are delivered one at a time, in order.
    pub aggregate: Option<String>,
    /// The body.
    pub payload: Vec<u8>,
}

impl OutboxMessage {
    /// A message for the business event `key` in `scope` (the scope's namespace names the kind of
    /// message, such as `coupon.grant`), with its id derived from both: enqueueing the same event
    /// again yields the same id.
    ///
    /// ```
    /// use idempotency_outbox::OutboxMessage;
    /// use idempotency_core::{IdempotencyKey, Scope};
    ///
    /// let scope = Scope::new("coupon.grant");
    /// let key = IdempotencyKey::parse("T1").unwrap();
    /// let a = OutboxMessage::new(&scope, &key, "coupons", b"{}".to_vec());
    /// let b = OutboxMessage::new(&scope, &key, "coupons", b"{}".to_vec());
    /// assert_eq!(a.id, b.id);
    /// assert!(IdempotencyKey::parse(&a.id).is_ok());
    /// ```
    pub fn new(
        scope: &Scope,
        key: &IdempotencyKey,
        topic: impl Into<String>,
        payload: impl Into<Vec<u8>>,
    ) -> Self {
        Self {
            id: message_id(scope, key),
            topic: topic.into(),
            key: key.as_str().to_owned(),
            aggregate: None,
            payload: payload.into(),
        }
    }

    /// Delivers this message only after every earlier message of `aggregate` was sent.
    pub fn ordered_by(mut self, aggregate: impl Into<String>) -> Self {
        self.aggregate = Some(aggregate.into());
        self
    }
}

/// The stable message id of the business event `key` in `scope`: 64 hex characters, a valid
/// [`IdempotencyKey`].
pub fn message_id(scope: &Scope, key: &IdempotencyKey) -> String {
    scope
        .derive(MESSAGE_ID_TAG, key.as_str().as_bytes())
        .to_hex()
}

/// A message a relay claimed: deliver it, then mark it sent (or failed) with its claim token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claimed {
    /// The row's sequence number (enqueue order).
    pub seq: i64,
    /// The claim token of the batch: marks by an owner whose lease ended change nothing.
    pub claim: i64,
    /// Failed deliveries so far.
    pub attempts: u32,
    /// How long ago it was enqueued, by the database's clock (the host's on SQLite): how long a
    /// relay has been trying to deliver it at most.
    pub age: Duration,
    /// The message.
    pub message: OutboxMessage,
}

/// A message refused `max_attempts` times, for operators.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadMessage {
    /// The row's sequence number.
    pub seq: i64,
    /// Failed deliveries.
    pub attempts: u32,
    /// The last failure.
    pub last_error: Option<String>,
    /// The message.
    pub message: OutboxMessage,
}

/// A purged sent message as an [`Archive::JsonLines`] archive holds it, one JSON object per line.
/// The payload is the business's message, which may be personal data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchivedMessage {
    /// The row's sequence number.
    pub seq: i64,
    /// The message id.
    pub id: String,
    /// Where it was delivered.
    pub topic: String,
    /// The business key it was derived from.
    pub business_key: String,
    /// Its ordering key, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregate: Option<String>,
    /// The body, base64.
    pub payload_base64: String,
    /// Failed deliveries before it was sent.
    pub attempts: u32,
    /// When it was enqueued, Unix milliseconds.
    pub created_at_ms: u64,
    /// When it was marked sent, Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_at_ms: Option<u64>,
    /// When it was archived, Unix milliseconds.
    pub archived_at_ms: u64,
}

/// Where one outbox message stands ([`Outbox::find`](Outbox)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageStatus {
    /// `pending`, `sent` or `dead`.
    pub state: String,
    /// Where it goes.
    pub topic: String,
    /// Failed deliveries so far.
    pub attempts: u32,
    /// The last failure, if any.
    pub last_error: Option<String>,
}

/// How many messages an outbox holds per state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutboxCounts {
    /// Waiting for delivery: claimed, due, or waiting for a retry's backoff.
    pub pending: u64,
    /// Delivered, not purged yet.
    pub sent: u64,
    /// Refused too often; waiting for an operator.
    pub dead: u64,
    /// Pending and claimed by a relay whose lease has not ended (being delivered).
    pub claimed: u64,
    /// Pending and due now: no relay holds them (a claim whose lease ended included).
    pub due: u64,
    /// How long the oldest pending message has waited since it was enqueued.
    pub oldest_pending: Option<Duration>,
}

/// The row of the counts statement: pending, sent, dead, claimed, due, and the oldest pending
/// message's age in microseconds.
pub(crate) type CountsRow = (i64, i64, i64, i64, i64, Option<i64>);

impl OutboxCounts {
    /// The counts of the counts statement's row (negative counts read as zero).
    pub(crate) fn of_row((pending, sent, dead, claimed, due, oldest): CountsRow) -> Self {
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        Self {
            pending: count(pending),
            sent: count(sent),
            dead: count(dead),
            claimed: count(claimed),
            due: count(due),
            oldest_pending: oldest.map(|micros| Duration::from_micros(count(micros))),
        }
    }
}

/// What a relay asks [`OutboxTable::claim`] for.
#[derive(Clone, Copy, Debug)]
pub struct ClaimBatch {
    /// At most this many messages.
    pub limit: usize,
    /// How long the claim holds before another relay may claim the messages again.
    pub lease: Duration,
    /// The token marks must carry (fresh per batch).
    pub claim: i64,
}

/// An outbox table on one database: `Outbox::postgres(pool)`, `Outbox::mysql(pool)`,
/// `Outbox::sqlite(pool)` (features `postgres`, `mysql`, `sqlite`), each with
/// `with_table_name`, `migrate` and `enqueue` (inside the caller's transaction); the relay side
/// through [`OutboxTable`].
#[derive(Debug)]
pub struct Outbox<DB: sqlx::Database> {
    pub(crate) pool: sqlx::Pool<DB>,
    pub(crate) sql: Arc<OutboxSql>,
    database: PhantomData<DB>,
}

impl<DB: sqlx::Database> Clone for Outbox<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            sql: Arc::clone(&self.sql),
            database: PhantomData,
        }
    }
}

impl<DB: sqlx::Database> Outbox<DB> {
    pub(crate) fn with_sql(pool: sqlx::Pool<DB>, sql: OutboxSql) -> Self {
        Self {
            pool,
            sql: Arc::new(sql),
            database: PhantomData,
        }
    }

    /// The pool the table lives in.
    pub fn pool(&self) -> &sqlx::Pool<DB> {
        &self.pool
    }
}

/// Checks an outbox table name: a plain identifier ([`validate_identifier`]).
pub(crate) fn checked_table(table: &str) -> Result<(), StoreError> {
    validate_identifier(table)
}

/// A row's column of attempts as the count it is.
pub(crate) fn attempts(column: i64) -> u32 {
    u32::try_from(column.max(0)).unwrap_or(u32::MAX)
}

/// A database an [`Outbox`] runs on: sqlx's `Postgres`, `MySql` and `Sqlite` (features
/// `postgres`, `mysql`, `sqlite`). Sealed: the outbox's statements are written for these three.
pub trait OutboxDatabase: shared::sealed::OutboxSteps {}

impl<D: shared::sealed::OutboxSteps> OutboxDatabase for D {}

/// The relay's side of an outbox: claim due messages, mark them, wait for new ones, and what
/// operators see. Implemented by [`Outbox`] on each database.
pub trait OutboxTable: Clone + Send + Sync + 'static {
    /// The table's name.
    fn table_name(&self) -> &str;

    /// Claims up to `batch.limit` due messages no other relay holds, oldest first (one per
    /// aggregate at a time), for `batch.lease`.
    fn claim(
        &self,
        batch: ClaimBatch,
    ) -> impl Future<Output = Result<Vec<Claimed>, StoreError>> + Send;

    /// Marks the messages `seqs` of claim `claim` sent; how many it marked (a message whose
    /// claim ended and was taken again by another relay is that relay's to mark).
    fn mark_sent(
        &self,
        claim: i64,
        seqs: &[i64],
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Counts a refused delivery of message `seq`: due again after `retry_in`, or `dead`.
    fn mark_failed(
        &self,
        claim: i64,
        seq: i64,
        error: &str,
        retry_in: Duration,
        dead: bool,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Gives the messages `seqs` back without counting a failure (the target was unreachable),
    /// due again after `retry_in`.
    fn release(
        &self,
        claim: i64,
        seqs: &[i64],
        retry_in: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Renews the lease of the messages `seqs` of claim `claim`: no other relay claims them for
    /// `lease` from now. How many it renewed: fewer than `seqs` when the claim of the others
    /// ended and another relay took them (or they were marked already).
    fn extend(
        &self,
        claim: i64,
        seqs: &[i64],
        lease: Duration,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// How long until the next pending message is due (zero if one is due now), if any is
    /// pending.
    fn next_due(&self) -> impl Future<Output = Result<Option<Duration>, StoreError>> + Send;

    /// Wake-ups for the relay: PostgreSQL `LISTEN`s for enqueues; other databases poll.
    fn listen(&self) -> impl Future<Output = Result<Notifications, StoreError>> + Send;

    /// Deletes up to `limit` messages sent more than `older_than` ago, the oldest first; how many.
    /// With an `archive` other than [`Archive::None`] the batch is copied there first: into a
    /// table of the same database (created on first use with the outbox's columns and
    /// `archived_at`) in the delete's transaction, or as JSON lines ([`ArchivedMessage`])
    /// written and flushed before the delete commits (a failure in between archives the batch
    /// again next time). Payloads may be personal data: the archive's retention is yours.
    fn purge_sent(
        &self,
        older_than: Duration,
        limit: usize,
        archive: &mut Archive,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Dead messages, oldest first, at most `limit`.
    fn dead(
        &self,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<DeadMessage>, StoreError>> + Send;

    /// Makes the dead message `id` pending again, due now, its attempts reset; whether it was
    /// dead.
    fn revive(&self, id: &str) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Messages per state.
    fn counts(&self) -> impl Future<Output = Result<OutboxCounts, StoreError>> + Send;
}

/// How a relay learns that messages were enqueued: `LISTEN` on PostgreSQL, nothing elsewhere
/// (the relay then polls).
pub struct Notifications {
    #[cfg(feature = "postgres")]
    listener: Option<sqlx::postgres::PgListener>,
}

impl std::fmt::Debug for Notifications {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifications")
            .field("listens", &self.listens())
            .finish()
    }
}

impl Notifications {
    /// No notifications: [`wait`](Self::wait) sleeps its whole bound.
    pub fn none() -> Self {
        Self {
            #[cfg(feature = "postgres")]
            listener: None,
        }
    }

    /// Whether enqueues wake the relay (otherwise it polls).
    pub fn listens(&self) -> bool {
        #[cfg(feature = "postgres")]
        {
            self.listener.is_some()
        }
        #[cfg(not(feature = "postgres"))]
        {
            false
        }
    }

    /// Waits for an enqueue, at most `at_most`; whether one was notified. A lost listening
    /// connection is reconnected (enqueues meanwhile are found by the next claim anyway).
    pub async fn wait(&mut self, at_most: Duration) -> bool {
        #[cfg(feature = "postgres")]
        if let Some(listener) = &mut self.listener {
            return match tokio::time::timeout(at_most, listener.recv()).await {
                Ok(Ok(_)) => true,
                Ok(Err(error)) => {
                    tracing::warn!(%error, "outbox LISTEN failed; polling until it reconnects");
                    tokio::time::sleep(at_most).await;
                    false
                }
                Err(_) => false,
            };
        }
        tokio::time::sleep(at_most).await;
        false
    }
}
