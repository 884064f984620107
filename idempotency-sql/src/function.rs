//! Runtime of the transactional (`tx = …`) and state-machine (`transition(…)`) modes of
//! `#[idempotent]`, on top of [`TxStore`] and [`Transition`]: the generated code calls it
//! (through `idempotency::sql::function` or `idempotency_sql::function`). A call is an
//! [`idempotency_function::Call`], as in the dedup mode, whose runtime is `idempotency_function`.

use std::future::Future;
use std::marker::PhantomData;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::tx::KeyedClaim;
use crate::{InTransaction, Transition, TransitionOutcome, TxClaim, TxLease, TxStore};
use idempotency_core::{BoxFuture, Error, Mechanism, Outcome, StoreError};
use idempotency_function::{Call, FnResult, STATUS_OK};

/// What a transactional `#[idempotent]`'s `store = …` may evaluate to: a [`TxStore`]
/// (`PostgresStore`, `SqliteStore`, `MySqlStore`), or anything that derefs to one (`Arc`, `&`).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a transactional idempotency store",
    label = "with `tx = …`, `store = …` must be a `PostgresStore`, `SqliteStore` or `MySqlStore` (or an `Arc`/reference to one)"
)]
pub trait AsTxStore {
    /// The store.
    type Store: TxStore;
    /// The store, by reference.
    fn idempotency_tx_store(&self) -> &Self::Store;
}

impl<S: TxStore> AsTxStore for S {
    type Store = S;
    fn idempotency_tx_store(&self) -> &S {
        self
    }
}

/// One transactional call: claim the key in the caller's transaction, let the body write in it,
/// then store the result in it too, so the record and the business writes commit together.
pub struct TxRun<'s, R, S, M> {
    store: &'s S,
    call: Option<Call>,
    map_err: M,
    result: PhantomData<fn() -> R>,
}

impl<R, S, M> std::fmt::Debug for TxRun<'_, R, S, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxRun")
            .field("call", &self.call)
            .finish_non_exhaustive()
    }
}

impl<'s, R, S, M> TxRun<'s, R, S, M>
where
    R: FnResult,
    R::Ok: Serialize + DeserializeOwned,
    S: TxStore,
    M: Fn(Error) -> R::Err,
{
    /// A call of `store` (TTL and lease are the store's `with_tx_ttl`/`with_tx_lease`).
    pub fn new(store: &'s S, call: Call, map_err: M) -> Self {
        Self {
            store,
            call: Some(call),
            map_err,
            result: PhantomData,
        }
    }

    /// Claims the key in `tx`. `Ok(lease)`: run the body. `Err(answer)`: return `answer` (the
    /// stored value of a duplicate, or an in-flight, mismatch or store error) without running it.
    pub async fn begin<T: InTransaction<S::Database> + ?Sized>(
        &mut self,
        tx: &mut T,
    ) -> Result<TxLease, R> {
        let Some(call) = self.call.take() else {
            return Err(self.fail(Error::Codec("TxRun::begin called twice".into())));
        };
        let (scope, key, fingerprint) = match call.into_parts() {
            Ok(parts) => parts,
            Err(error) => return Err(self.fail(error)),
        };
        let keyed = KeyedClaim::new(self.store, &scope, Mechanism::Function, &key);
        let request = keyed.request(self.store, &fingerprint);
        let claim = self.store.claim_storage_key_in_tx(tx, request).await;
        match claim {
            Ok(TxClaim::Execute(lease)) => Ok(lease),
            Ok(TxClaim::Replay(outcome)) => Err(R::from_result(
                decode::<R::Ok>(&outcome, STATUS_OK).map_err(&self.map_err),
            )),
            Ok(TxClaim::InFlight { retry_after }) => {
                Err(self.fail(Error::InFlight { retry_after }))
            }
            Ok(TxClaim::Mismatch) => Err(self.fail(Error::Mismatch)),
            Err(error) => Err(self.fail(error)),
        }
    }

    /// Pins the body's output type to the function's return type.
    pub fn body<F: Future<Output = R>>(&self, body: F) -> F {
        body
    }

    /// Stores `Ok(T)` in `tx`; on `Err(E)` deletes the claim in `tx` (a retry runs again even if
    /// the caller commits). If the record cannot be written, the answer is an error, so the
    /// caller rolls back the business writes with it.
    pub async fn finish<T: InTransaction<S::Database> + ?Sized>(
        &self,
        tx: &mut T,
        lease: TxLease,
        result: R,
    ) -> R {
        match result.into_result() {
            Ok(value) => {
                let stored = match serde_json::to_vec(&value) {
                    Ok(body) => {
                        self.store
                            .complete_in_tx(tx, lease, &Outcome::new(STATUS_OK, body))
                            .await
                    }
                    Err(error) => Err(Error::Codec(format!("result: {error}").into())),
                };
                match stored {
                    Ok(()) => R::from_result(Ok(value)),
                    Err(error) => {
                        tracing::error!(%error, "could not record an idempotent result in the transaction; roll it back");
                        R::from_result(Err((self.map_err)(error)))
                    }
                }
            }
            Err(error) => {
                // A failed (aborted) transaction refuses this too; it is rolled back anyway.
                let _ = self.store.release_in_tx(tx, lease).await;
                R::from_result(Err(error))
            }
        }
    }

    fn fail(&self, error: Error) -> R {
        R::from_result(Err((self.map_err)(error)))
    }
}

/// A connection or transaction a `transition(…)` runs on (`executor = tx`): `&mut` a
/// `sqlx::Transaction` or a `PgConnection`/`SqliteConnection`/`MySqlConnection`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot run a state transition",
    label = "write `executor = tx` with a `&mut sqlx::Transaction` (or a `&mut` connection); the side effects belong in the same transaction"
)]
pub trait TransitionExecutor: Send {
    /// The database.
    type Database: sqlx::Database;

    /// Applies `transition` to the row with `id` (boxed: the future stays `Send` for any
    /// caller, whatever the higher-ranked bounds of the id type).
    fn apply_transition<'a, I>(
        &'a mut self,
        transition: &'a Transition,
        id: I,
    ) -> BoxFuture<'a, Result<TransitionOutcome, StoreError>>
    where
        I: for<'q> sqlx::Encode<'q, Self::Database>
            + sqlx::Type<Self::Database>
            + Send
            + Clone
            + 'a;
}

/// Implements [`TransitionExecutor`] for `$executor` on database `$db`, `$apply` being what
/// `apply_transition` returns (`$this` the executor). A macro: the impls differ only in these,
/// and the id's bounds name each database, so one generic impl over connections cannot be
/// written.
macro_rules! transition_executor {
    (
        $(#[$attr:meta])*
        impl[$($generics:tt)*] $executor:ty => $db:ty $(, where [$($bounds:tt)*])?,
        |$this:ident, $transition:ident, $id:ident| $apply:expr
    ) => {
        $(#[$attr])*
        impl<$($generics)*> TransitionExecutor for $executor $(where $($bounds)*)? {
            type Database = $db;
            fn apply_transition<'a, I>(
                &'a mut self,
                $transition: &'a Transition,
                $id: I,
            ) -> BoxFuture<'a, Result<TransitionOutcome, StoreError>>
            where
                I: for<'q> sqlx::Encode<'q, $db> + sqlx::Type<$db> + Send + Clone + 'a,
            {
                let $this = self;
                $apply
            }
        }
    };
}

transition_executor!(
    impl['t, DB] sqlx::Transaction<'t, DB> => DB,
        where [DB: sqlx::Database, DB::Connection: TransitionExecutor<Database = DB>],
    |tx, transition, id| (**tx).apply_transition(transition, id)
);

transition_executor!(
    #[cfg(feature = "sqlite")]
    impl[] sqlx::SqliteConnection => sqlx::Sqlite,
    |conn, transition, id| Box::pin(transition.apply_sqlite(conn, id))
);

transition_executor!(
    #[cfg(feature = "postgres")]
    impl[] sqlx::PgConnection => sqlx::Postgres,
    |conn, transition, id| Box::pin(transition.apply_postgres(conn, id))
);

transition_executor!(
    #[cfg(feature = "mysql")]
    impl[] sqlx::MySqlConnection => sqlx::MySql,
    |conn, transition, id| Box::pin(transition.apply_mysql(conn, id))
);

/// The transition of a `transition(table, id_column, column, from, to)` attribute; states are
/// text or integer codes ([`StateValue`](crate::StateValue)).
pub fn transition(
    table: &str,
    id_column: &str,
    column: &str,
    from: &[crate::StateValue],
    to: crate::StateValue,
) -> Result<Transition, StoreError> {
    let transition = Transition::new(table, id_column, column)?;
    Ok(from
        .iter()
        .fold(transition, |t, state| t.from(state.clone()))
        .to(to))
}

/// Applies a transition before the body of a state-machine `#[idempotent]`:
/// `None` → applied, run the body (the side effects); `Some(answer)` → return `answer` without
/// running it: `Ok(already())` when the row already is in the target state, else
/// [`Error::IllegalTransition`], [`Error::NotFound`] or a store error.
pub async fn apply<R, C, I, A, M>(
    executor: &mut C,
    transition: Result<Transition, StoreError>,
    id: I,
    already: A,
    map_err: M,
) -> Option<R>
where
    R: FnResult,
    C: TransitionExecutor + ?Sized,
    I: for<'q> sqlx::Encode<'q, C::Database> + sqlx::Type<C::Database> + Send + Clone,
    A: FnOnce() -> R::Ok,
    M: FnOnce(Error) -> R::Err,
{
    let outcome = match transition {
        Ok(transition) => executor.apply_transition(&transition, id).await,
        Err(error) => Err(error),
    };
    let answer = match outcome {
        Ok(TransitionOutcome::Applied) => return None,
        Ok(TransitionOutcome::AlreadyInTarget) => Ok(already()),
        Ok(TransitionOutcome::Illegal { current }) => {
            Err(map_err(Error::IllegalTransition { current }))
        }
        Ok(TransitionOutcome::NotFound) => Err(map_err(Error::NotFound)),
        Err(error) => Err(map_err(error)),
    };
    Some(R::from_result(answer))
}

/// The stored `T` of `outcome`, written by a call of the same kind (status `expected`).
fn decode<T: DeserializeOwned>(outcome: &Outcome, expected: u16) -> Result<T, Error> {
    if outcome.status != expected {
        return Err(Error::Codec(
            format!(
                "stored status {} is not {expected}: the record was written by another kind of caller",
                outcome.status
            )
            .into(),
        ));
    }
    serde_json::from_slice(&outcome.body)
        .map_err(|error| Error::Codec(format!("stored value: {error}").into()))
}
