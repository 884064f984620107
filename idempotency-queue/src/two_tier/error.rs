//! Why a [`SqlTruth`](super::SqlTruth) handler failed.

use std::fmt;

use idempotency_core::StoreError;

/// A failure of the SQL tier; every one rolls the transaction back and requeues the message.
#[derive(Debug)]
pub enum TruthError<E> {
    /// The database failed (begin, commit, connection).
    Database(sqlx::Error),
    /// The dedup record could not be claimed or completed.
    Store(StoreError),
    /// The business code failed.
    Business(E),
    /// The business code's output could not be stored (it did not serialize to JSON).
    Output(serde_json::Error),
    /// The business code kept its [`Tx`](super::Tx) beyond its return (moved it into a spawned
    /// task): the transaction is not committed under it.
    Escaped,
}

impl<E: fmt::Display> fmt::Display for TruthError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Database(error) => write!(f, "database: {error}"),
            Self::Store(error) => write!(f, "dedup record: {error}"),
            Self::Business(error) => write!(f, "business: {error}"),
            Self::Output(error) => write!(f, "business output not storable: {error}"),
            Self::Escaped => f.write_str("the business code kept its transaction handle"),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for TruthError<E> {}
