//! [`Tx`]: the business transaction, handed to the business code by value.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, PoisonError};

use futures_util::future::BoxFuture;
use sqlx::Database;
use tokio::sync::{Mutex, MutexGuard};

/// What runs once the truth's transaction committed ([`Tx::after_commit`]).
pub(crate) type AfterCommit = BoxFuture<'static, ()>;

/// What the business code's handle and the truth's share.
struct Shared<DB: Database> {
    tx: Mutex<sqlx::Transaction<'static, DB>>,
    after_commit: std::sync::Mutex<Vec<AfterCommit>>,
}

/// The transaction a [`SqlTruth`](super::SqlTruth)'s business code writes through, the key's
/// dedup record already claimed in it.
///
/// The business code gets it by value, so it is a plain `async move` closure: no borrowed
/// arguments, no higher-ranked lifetimes, no `Box::pin`, and a closure of your own can wrap it.
/// Queries take its connection, [`conn`](Self::conn):
///
/// ```
/// # #[cfg(feature = "sql")] async fn grant(tx: idempotency_queue::two_tier::Tx<sqlx::Postgres>) -> Result<(), sqlx::Error> {
/// sqlx::query("INSERT INTO coupons (trade_no) VALUES ($1)")
///     .bind("T1")
///     .execute(&mut *tx.conn().await)
///     .await?;
/// tx.after_commit(async { println!("coupon for T1 granted") });
/// # Ok(()) }
/// ```
///
/// When the business code returns, the truth completes the record in the transaction and
/// commits, then runs what the business code asked to run after the commit
/// ([`after_commit`](Self::after_commit)). A `Tx` kept beyond that (moved into a spawned
/// task) is refused: the transaction rolls back and the delivery is requeued
/// ([`TruthError::Escaped`](super::TruthError::Escaped)).
pub struct Tx<DB: Database> {
    shared: Arc<Shared<DB>>,
}

impl<DB: Database> std::fmt::Debug for Tx<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tx").finish_non_exhaustive()
    }
}

impl<DB: Database> Tx<DB> {
    /// Wraps a transaction; the second handle stays with the truth, to commit.
    pub(crate) fn split(tx: sqlx::Transaction<'static, DB>) -> (Self, Self) {
        let shared = Arc::new(Shared {
            tx: Mutex::new(tx),
            after_commit: std::sync::Mutex::new(Vec::new()),
        });
        (
            Self {
                shared: Arc::clone(&shared),
            },
            Self { shared },
        )
    }

    /// The transaction back and what is to run after its commit, once no other handle is left
    /// (`None` if the business code kept one).
    pub(crate) fn into_parts(self) -> Option<(sqlx::Transaction<'static, DB>, Vec<AfterCommit>)> {
        let shared = Arc::try_unwrap(self.shared).ok()?;
        let hooks = shared
            .after_commit
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        Some((shared.tx.into_inner(), hooks))
    }

    /// The transaction's connection, for sqlx queries (`.execute(&mut *tx.conn().await)`);
    /// one at a time.
    pub async fn conn(&self) -> TxConn<'_, DB> {
        TxConn(self.shared.tx.lock().await)
    }

    /// Runs `hook` once the truth committed this transaction (the business writes with the
    /// key's record), right after the commit and before the truth answers, so before the
    /// consumer records the key in its fast tier and acks the message; never when the
    /// transaction rolls back (a business error, a panic, an output that does not serialize,
    /// a failed commit, a [`Tx`] kept too long), and never for a replay, where the business
    /// code does not run. For what must not happen before the writes are durable and must
    /// not happen if they are not: waking an in-process relay, invalidating a cache, a log
    /// line or a metric of the grant. Hooks run in the order they were added, each awaited:
    /// the delivery is acked after them, so keep them quick (spawn a task for slow work). A
    /// panicking hook fails the delivery, which is requeued and then answered by the
    /// committed record. A side effect for another service belongs in the outbox, in the
    /// transaction, not here: a process that dies between the commit and its hook never runs
    /// the hook, and the redelivery finds the record and does not run the business code
    /// again.
    pub fn after_commit(&self, hook: impl std::future::Future<Output = ()> + Send + 'static) {
        self.shared
            .after_commit
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Box::pin(hook));
    }
}

/// The connection of a [`Tx`], held while a query runs.
pub struct TxConn<'a, DB: Database>(MutexGuard<'a, sqlx::Transaction<'static, DB>>);

impl<DB: Database> Deref for TxConn<'_, DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &DB::Connection {
        &self.0
    }
}

impl<DB: Database> DerefMut for TxConn<'_, DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        &mut self.0
    }
}
