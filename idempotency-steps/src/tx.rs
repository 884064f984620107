//! The transaction a local step writes through.

use std::ops::{Deref, DerefMut};

use idempotency_sql::{InTransaction, StepStore};

/// The database of store `S`.
pub type Db<S> = <S as idempotency_sql::TxStore>::Database;

/// A connection of store `S`'s database.
pub type Connection<S> = <Db<S> as sqlx::Database>::Connection;

/// The transaction of a local step ([`Run::local`](crate::Run::local)): its queries take the
/// connection (`&mut **tx`, as with a `sqlx::Transaction`), library calls that write inside a
/// transaction take it whole (an outbox's `enqueue(tx, ..)`). The run commits it, with the
/// step's checkpoint.
pub struct StepTx<'c, S: StepStore> {
    pub(crate) conn: &'c mut Connection<S>,
}

impl<S: StepStore> std::fmt::Debug for StepTx<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepTx").finish_non_exhaustive()
    }
}

impl<S: StepStore> Deref for StepTx<'_, S> {
    type Target = Connection<S>;

    fn deref(&self) -> &Self::Target {
        self.conn
    }
}

impl<S: StepStore> DerefMut for StepTx<'_, S> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.conn
    }
}

impl<S: StepStore> InTransaction<Db<S>> for StepTx<'_, S> {
    fn connection(&mut self) -> &mut Connection<S> {
        self.conn
    }
}
