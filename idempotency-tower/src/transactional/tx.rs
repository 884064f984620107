//! The request's transaction, as a handler holds it: [`Tx`].

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use http::Response;
use idempotency_sql::InTransaction;

use crate::refusal::{ProblemJson, Refusal, RefusalKind, RenderRefusal};

/// What runs once the request's transaction committed ([`Tx::after_commit`]).
pub(crate) type AfterCommit = Box<dyn FnOnce() + Send>;

/// Where the request's transaction waits between the layer and its handler.
pub(crate) struct Slot<DB: sqlx::Database> {
    state: Mutex<SlotState<DB>>,
}

struct SlotState<DB: sqlx::Database> {
    /// The transaction while no [`Tx`] holds it.
    tx: Option<sqlx::Transaction<'static, DB>>,
    /// Whether a [`Tx`] was handed out (there is one per request).
    handed_out: bool,
    /// The handler's choice: commit its writes, store no record.
    without_record: bool,
    /// What the handler asked to run after the commit.
    after_commit: Vec<AfterCommit>,
}

impl<DB: sqlx::Database> Slot<DB> {
    /// A slot holding `tx`.
    pub(crate) fn new(tx: sqlx::Transaction<'static, DB>) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(SlotState {
                tx: Some(tx),
                handed_out: false,
                without_record: false,
                after_commit: Vec::new(),
            }),
        })
    }

    fn state(&self) -> MutexGuard<'_, SlotState<DB>> {
        // Nothing panics while holding the lock; a poisoned lock still holds consistent state.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the transaction back once the handler answered, with the handler's choice to
    /// commit without a record; `None` if the handler still holds it.
    pub(crate) fn reclaim(&self) -> (Option<sqlx::Transaction<'static, DB>>, bool) {
        let mut state = self.state();
        (state.tx.take(), state.without_record)
    }

    /// Takes what the handler asked to run after the commit.
    pub(crate) fn after_commit(&self) -> Vec<AfterCommit> {
        std::mem::take(&mut self.state().after_commit)
    }
}

/// The request's transaction, for the handler of a route behind a
/// [`TransactionalLayer`](super::TransactionalLayer): the idempotency key is already claimed in
/// it. Do the business writes in it (`&mut *tx` is the connection, as with a
/// `sqlx::Transaction`); when the handler answers, the layer stores the response as the key's
/// outcome in the same transaction and commits, or rolls everything back (an error, a response
/// the storage policy does not keep, a panic).
///
/// A handler cannot commit or roll back itself: the layer does, so the record and the business
/// writes always go together. To commit the writes and let the key run again on retry, call
/// [`commit_without_record`](Self::commit_without_record). Library calls that take a transaction
/// (`TxStore`, `#[idempotent(tx = …)]`) take `&mut tx`.
///
/// In axum, `Tx<Postgres>` (or `Tx<MySql>`, `Tx<Sqlite>`) is an extractor (feature `axum`); in
/// tonic, take it from the request with [`Tx::from_extensions`].
pub struct Tx<DB: sqlx::Database> {
    /// `Some` until dropped.
    tx: Option<sqlx::Transaction<'static, DB>>,
    slot: Arc<Slot<DB>>,
}

impl<DB: sqlx::Database> std::fmt::Debug for Tx<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tx").finish_non_exhaustive()
    }
}

impl<DB: sqlx::Database> Tx<DB> {
    /// Takes the request's transaction from its extensions (tonic:
    /// `Tx::from_extensions(request.extensions())`, through `TxHandle`; axum extracts it).
    pub fn from_handle(handle: &TxHandle<DB>) -> Result<Self, TxUnavailable> {
        let mut state = handle.0.state();
        match (state.tx.take(), state.handed_out) {
            (Some(tx), false) => {
                state.handed_out = true;
                Ok(Self {
                    tx: Some(tx),
                    slot: Arc::clone(&handle.0),
                })
            }
            (tx, _) => {
                state.tx = tx;
                Err(TxUnavailable::TakenTwice)
            }
        }
    }

    /// Commits the handler's writes, but stores no record: the key is released in the same
    /// transaction, and the client's retry runs the handler again. For an answer that must not
    /// be replayed although some writes must stay (an audit row of a refused request, say).
    pub fn commit_without_record(self) {
        self.slot.state().without_record = true;
    }

    /// Runs `hook` once the layer committed this transaction (with the record, or without one
    /// as [`commit_without_record`](Self::commit_without_record) asks), right after the commit
    /// and before the response leaves; never when the transaction rolls back (an error, a
    /// response the policy does not store, a panic, a failed commit), and never for a replay.
    /// For what must not happen before the writes are durable and must not happen if they are
    /// not: waking an in-process outbox relay, invalidating a cache, a metric. Keep it quick
    /// (spawn a task for slow work); hooks run in the order they were added. A side effect for
    /// another service belongs in the outbox, in the transaction, not here: a process that dies
    /// between the commit and its hook never runs the hook.
    pub fn after_commit(&mut self, hook: impl FnOnce() + Send + 'static) {
        self.slot.state().after_commit.push(Box::new(hook));
    }

    fn transaction(&mut self) -> &mut sqlx::Transaction<'static, DB> {
        match &mut self.tx {
            Some(tx) => tx,
            None => unreachable!("a Tx holds its transaction until dropped"),
        }
    }
}

impl<DB: sqlx::Database> std::ops::Deref for Tx<DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &DB::Connection {
        match &self.tx {
            Some(tx) => tx,
            None => unreachable!("a Tx holds its transaction until dropped"),
        }
    }
}

impl<DB: sqlx::Database> std::ops::DerefMut for Tx<DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        self.transaction()
    }
}

impl<DB: sqlx::Database> InTransaction<DB> for Tx<DB> {
    fn connection(&mut self) -> &mut DB::Connection {
        self.transaction()
    }
}

impl<DB: sqlx::Database> Drop for Tx<DB> {
    /// Gives the transaction back to the layer, which commits or rolls it back.
    fn drop(&mut self) {
        self.slot.state().tx = self.tx.take();
    }
}

/// The request extension through which a handler takes the request's transaction
/// ([`Tx::from_handle`]); the axum extractor and [`Tx::from_extensions`] read it for you.
pub struct TxHandle<DB: sqlx::Database>(pub(crate) Arc<Slot<DB>>);

impl<DB: sqlx::Database> Clone for TxHandle<DB> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<DB: sqlx::Database> std::fmt::Debug for TxHandle<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TxHandle")
    }
}

impl<DB: sqlx::Database> Tx<DB> {
    /// Takes the request's transaction from the request's extensions: `http::Extensions`, or
    /// tonic's (`request.extensions()`), through anything that finds a [`TxHandle`].
    ///
    /// ```
    /// # #[cfg(feature = "postgres")] {
    /// use idempotency_tower::transactional::{Tx, TxUnavailable};
    ///
    /// // In a tonic handler: `request.extensions().get()` of its `tonic::Request`.
    /// fn pay(extensions: &http::Extensions) -> Result<(), TxUnavailable> {
    ///     let tx = Tx::<sqlx::Postgres>::from_extensions(extensions.get())?;
    ///     // … business writes on &mut *tx …
    ///     # drop(tx);
    ///     Ok(())
    /// }
    /// assert_eq!(pay(&http::Extensions::new()).unwrap_err(), TxUnavailable::NoTransaction);
    /// # }
    /// ```
    pub fn from_extensions(handle: Option<&TxHandle<DB>>) -> Result<Self, TxUnavailable> {
        Self::from_handle(handle.ok_or(TxUnavailable::NoTransaction)?)
    }
}

/// Why a handler got no transaction. Nothing was committed; the answer is a 500 (a programming
/// error in the service, not the client's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TxUnavailable {
    /// The route is not behind a transactional layer (or the request passed through it
    /// unguarded, without a key where the key is optional).
    #[error("no transaction: the route is not behind a transactional idempotency layer")]
    NoTransaction,
    /// The transaction was taken already (the handler asked twice).
    #[error("the request's transaction was taken already")]
    TakenTwice,
}

impl TxUnavailable {
    /// The problem+json answer (500).
    pub fn to_response(self) -> Response<Bytes> {
        ProblemJson::new().render(&Refusal::new(
            RefusalKind::TransactionUnavailable,
            self.to_string(),
        ))
    }
}

#[cfg(feature = "axum")]
mod axum_extract {
    use axum_core::extract::FromRequestParts;
    use axum_core::response::{IntoResponse, Response};
    use http::request::Parts;

    use super::{Tx, TxHandle, TxUnavailable};

    impl IntoResponse for TxUnavailable {
        fn into_response(self) -> Response {
            self.to_response().map(axum_core::body::Body::from)
        }
    }

    impl<S: Send + Sync, DB: sqlx::Database> FromRequestParts<S> for Tx<DB> {
        type Rejection = TxUnavailable;

        async fn from_request_parts(
            parts: &mut Parts,
            _state: &S,
        ) -> Result<Self, Self::Rejection> {
            Tx::from_extensions(parts.extensions.get::<TxHandle<DB>>())
        }
    }
}

#[cfg(feature = "tonic")]
impl From<TxUnavailable> for tonic::Status {
    fn from(error: TxUnavailable) -> Self {
        tonic::Status::internal(error.to_string())
    }
}
