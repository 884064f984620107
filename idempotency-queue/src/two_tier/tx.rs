//! [`Tx`]: the business transaction, handed to the business code by value.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use sqlx::Database;
use tokio::sync::{Mutex, MutexGuard};

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
/// # Ok(()) }
/// ```
///
/// When the business code returns, the truth completes the record in the transaction and
/// commits. A `Tx` kept beyond that (moved into a spawned task) is refused: the transaction
/// rolls back and the delivery is requeued ([`TruthError::Escaped`](super::TruthError::Escaped)).
pub struct Tx<DB: Database> {
    inner: Arc<Mutex<sqlx::Transaction<'static, DB>>>,
}

impl<DB: Database> std::fmt::Debug for Tx<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tx").finish_non_exhaustive()
    }
}

impl<DB: Database> Tx<DB> {
    /// Wraps a transaction; the second handle stays with the truth, to commit.
    pub(crate) fn split(tx: sqlx::Transaction<'static, DB>) -> (Self, Self) {
        let inner = Arc::new(Mutex::new(tx));
        (
            Self {
                inner: Arc::clone(&inner),
            },
            Self { inner },
        )
    }

    /// The transaction back, once no other handle is left (`None` if the business code kept
    /// one).
    pub(crate) fn into_transaction(self) -> Option<sqlx::Transaction<'static, DB>> {
        Arc::try_unwrap(self.inner).ok().map(Mutex::into_inner)
    }

    /// The transaction's connection, for sqlx queries (`.execute(&mut *tx.conn().await)`);
    /// one at a time.
    pub async fn conn(&self) -> TxConn<'_, DB> {
        TxConn(self.inner.lock().await)
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
