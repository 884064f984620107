//! What runs with steps (crate `idempotency-steps`) need of a record table: an owner's hold that
//! ends with its connection, a fenced checkpoint, a step's transaction on the owner's connection.

use std::borrow::Cow;
use std::collections::HashSet;
use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use idempotency_core::{
    Claim, ClaimRequest, Error, FencingToken, Outcome, Progress, Record, RecordState, StorageKey,
};
use sqlx::TransactionManager;

use crate::common::{ListFilter, map_err, micros, owned, token_param};
use crate::dialect::sealed::{Param, Values};
use crate::dialect::{Dialect, SqlStore};
use crate::tx::TxStore;

/// A record table that runs with steps checkpoint on.
///
/// A run's owner keeps one connection for the whole run and **holds** its key on it: a
/// session-level advisory lock on PostgreSQL (`pg_try_advisory_lock`), a named lock on
/// MySQL/MariaDB (`GET_LOCK`). The database drops the hold when the owner's connection closes,
/// so a process that dies is noticed at once: the next claimer's hold succeeds and it takes the
/// run over without waiting for the lease. SQLite is embedded and has no session locks: the
/// hold is kept in the process, and a run of a process that died is taken over when its lease
/// ends (each checkpoint renews it).
///
/// | step | statements |
/// |---|---|
/// | start: hold and claim of a new key | 1 on PostgreSQL, 4 on MySQL (3 on SQLite) |
/// | give the hold back | 1 (none on SQLite) |
/// | checkpoint (in the step's transaction, or alone after a foreign call) | 1 |
/// | take over a held-free run whose lease is still live | 1, then the claim |
pub trait StepStore: TxStore {
    /// Whether a dead owner's hold ends with its connection (PostgreSQL, MySQL), rather than
    /// with its lease (SQLite).
    const HOLD_ENDS_WITH_CONNECTION: bool;

    /// Takes the hold on `key` on `conn`: `false` while another live owner holds it.
    fn hold(
        &self,
        conn: &mut <Self::Database as sqlx::Database>::Connection,
        key: &StorageKey,
    ) -> impl Future<Output = Result<bool, Error>> + Send;

    /// Gives the hold on `key` back. A connection whose hold could not be given back must be
    /// closed, not returned to its pool ([`forget_hold`](Self::forget_hold) then).
    fn unhold(
        &self,
        conn: &mut <Self::Database as sqlx::Database>::Connection,
        key: &StorageKey,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// Forgets a hold whose connection is being closed (SQLite's in-process hold; a no-op where
    /// the database drops the hold with the connection).
    fn forget_hold(&self, key: &StorageKey);

    /// Begins a step's transaction on the owner's connection (`BEGIN IMMEDIATE` on SQLite).
    /// The connection stays in it until [`commit_on`](Self::commit_on) or
    /// [`rollback_on`](Self::rollback_on); a connection dropped inside it is closed.
    fn begin_on(
        &self,
        conn: &mut <Self::Database as sqlx::Database>::Connection,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// Commits the step's transaction [`begin_on`](Self::begin_on) began.
    fn commit_on(
        &self,
        conn: &mut <Self::Database as sqlx::Database>::Connection,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// Rolls the step's transaction [`begin_on`](Self::begin_on) began back.
    fn rollback_on(
        &self,
        conn: &mut <Self::Database as sqlx::Database>::Connection,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// Writes `progress` on the record the owner of `token` holds and renews its lease, on
    /// `conn` (inside a step's transaction, or alone). [`Error::LeaseLost`] if another owner
    /// took the run over.
    fn checkpoint_on(
        &self,
        conn: &mut <Self::Database as sqlx::Database>::Connection,
        key: &StorageKey,
        token: FencingToken,
        progress: &Progress,
        lease: Duration,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// Takes the hold on `request.key` and claims it, on the owner's connection: whether the
    /// hold was taken, and the claim (`None`: another owner holds the key). With the hold, an
    /// in-progress run whose owner is gone (its hold ended with its connection, or its lease
    /// on SQLite) is taken over at once, unless another payload's checkpoints are on it (a
    /// mismatch). One statement on PostgreSQL for a new key; elsewhere the hold, a read, then
    /// the claim.
    fn start_on(
        &self,
        conn: &mut <Self::Database as sqlx::Database>::Connection,
        request: ClaimRequest<'_>,
    ) -> impl Future<Output = Result<(bool, Option<Claim>), Error>> + Send;

    /// Waits up to `wait` on `conn` for the hold on `key` that a live owner has: `true` once
    /// taken (its owner completed, paused or died; claim it then with
    /// [`claim_held_on`](Self::claim_held_on)), `false` when the wait ran out. The database
    /// wakes the waiter: no polling. `false` at once on SQLite, whose holds are in the process.
    fn hold_waiting_on(
        &self,
        conn: &mut <Self::Database as sqlx::Database>::Connection,
        key: &StorageKey,
        wait: Duration,
    ) -> impl Future<Output = Result<bool, Error>> + Send;

    /// Claims `request.key`, which `conn` holds, as [`start_on`](Self::start_on) does once it
    /// has the hold.
    fn claim_held_on(
        &self,
        conn: &mut <Self::Database as sqlx::Database>::Connection,
        request: ClaimRequest<'_>,
    ) -> impl Future<Output = Result<Claim, Error>> + Send;

    /// [`Store::claim`](idempotency_core::Store::claim) on the owner's connection.
    fn claim_on(
        &self,
        conn: &mut <Self::Database as sqlx::Database>::Connection,
        request: ClaimRequest<'_>,
    ) -> impl Future<Output = Result<Claim, Error>> + Send;

    /// Stores the run's outcome on the owner's connection (kept for `ttl`).
    /// [`Error::LeaseLost`] if another owner took the run over.
    fn complete_on(
        &self,
        conn: &mut <Self::Database as sqlx::Database>::Connection,
        key: &StorageKey,
        token: FencingToken,
        outcome: &Outcome,
        ttl: Duration,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// Stores the run's outcome and gives its hold on `key` back, on the owner's connection: one
    /// statement on PostgreSQL, the complete then the give-back elsewhere.
    /// [`Error::LeaseLost`] if another owner took the run over (the hold is then kept: close
    /// the connection).
    fn complete_unhold_on(
        &self,
        conn: &mut <Self::Database as sqlx::Database>::Connection,
        key: &StorageKey,
        token: FencingToken,
        outcome: &Outcome,
        ttl: Duration,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// The in-progress records of `namespace` with checkpoints, least recently written first,
    /// at most `limit`: what the completer may resume.
    fn resumable(
        &self,
        namespace: &str,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Record>, Error>> + Send;

    /// Ends the lease of the in-progress record of `key` at once, so that the claim that
    /// follows takes it over: only for a caller that holds `key`, whose previous owner is
    /// therefore gone.
    fn expire_on(
        &self,
        conn: &mut <Self::Database as sqlx::Database>::Connection,
        key: &StorageKey,
    ) -> impl Future<Output = Result<(), Error>> + Send;
}

impl<D: Dialect> StepStore for SqlStore<D> {
    const HOLD_ENDS_WITH_CONNECTION: bool = D::HOLD_ENDS_WITH_CONNECTION;

    async fn hold(&self, conn: &mut D::Connection, key: &StorageKey) -> Result<bool, Error> {
        D::hold_on(conn, self.table_name(), key).await
    }

    async fn unhold(&self, conn: &mut D::Connection, key: &StorageKey) -> Result<(), Error> {
        D::unhold_on(conn, self.table_name(), key).await
    }

    fn forget_hold(&self, key: &StorageKey) {
        if !D::HOLD_ENDS_WITH_CONNECTION {
            in_process::give_back(self.table_name(), key);
        }
    }

    async fn begin_on(&self, conn: &mut D::Connection) -> Result<(), Error> {
        D::TransactionManager::begin(conn, D::BEGIN.map(Cow::Borrowed))
            .await
            .map_err(map_err)
    }

    async fn commit_on(&self, conn: &mut D::Connection) -> Result<(), Error> {
        D::TransactionManager::commit(conn).await.map_err(map_err)
    }

    async fn rollback_on(&self, conn: &mut D::Connection) -> Result<(), Error> {
        D::TransactionManager::rollback(conn).await.map_err(map_err)
    }

    async fn checkpoint_on(
        &self,
        conn: &mut D::Connection,
        key: &StorageKey,
        token: FencingToken,
        progress: &Progress,
        lease: Duration,
    ) -> Result<(), Error> {
        let encoded = progress.encode();
        let values = Values {
            key: key.0.as_slice(),
            token: token_param(token)?,
            body: &encoded,
            span: micros(lease),
            ..Values::default()
        };
        let sql = &self.sql.checkpoint;
        owned(D::bound_in_order(conn, sql, D::CHECKPOINT, values).await?)
    }

    async fn start_on(
        &self,
        conn: &mut D::Connection,
        request: ClaimRequest<'_>,
    ) -> Result<(bool, Option<Claim>), Error> {
        D::start_on(self, conn, request).await
    }

    async fn hold_waiting_on(
        &self,
        conn: &mut D::Connection,
        key: &StorageKey,
        wait: Duration,
    ) -> Result<bool, Error> {
        D::hold_waiting_on(conn, self.table_name(), key, wait).await
    }

    async fn claim_held_on(
        &self,
        conn: &mut D::Connection,
        request: ClaimRequest<'_>,
    ) -> Result<Claim, Error> {
        D::claim_held_on(self, conn, request).await
    }

    async fn claim_on(
        &self,
        conn: &mut D::Connection,
        request: ClaimRequest<'_>,
    ) -> Result<Claim, Error> {
        D::claim_on(self, conn, request).await
    }

    async fn complete_on(
        &self,
        conn: &mut D::Connection,
        key: &StorageKey,
        token: FencingToken,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), Error> {
        D::complete_on(self, conn, key, token, outcome, ttl).await
    }

    async fn complete_unhold_on(
        &self,
        conn: &mut D::Connection,
        key: &StorageKey,
        token: FencingToken,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), Error> {
        D::complete_unhold_on(self, conn, key, token, outcome, ttl).await
    }

    async fn resumable(&self, namespace: &str, limit: usize) -> Result<Vec<Record>, Error> {
        let filter = ListFilter::new(limit)
            .namespace(namespace)
            .state(RecordState::InProgress);
        let mut records = self.list(&filter).await?;
        records.retain(|record| record.progress.is_some());
        Ok(records)
    }

    async fn expire_on(&self, conn: &mut D::Connection, key: &StorageKey) -> Result<(), Error> {
        let values = Values {
            key: key.0.as_slice(),
            ..Values::default()
        };
        D::bound_in_order(conn, &self.sql.expire, &[Param::Key], values).await?;
        Ok(())
    }
}

/// The advisory lock id of `key` on PostgreSQL: its first eight bytes (a collision with
/// another key only makes one run wait for the other).
#[cfg(feature = "postgres")]
pub(crate) fn lock_id(key: &StorageKey) -> i64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&key.0[..8]);
    i64::from_be_bytes(bytes)
}

/// The named lock of `key` in `table` on MySQL (at most 64 characters).
#[cfg(feature = "mysql")]
pub(crate) fn lock_name(table: &str, key: &StorageKey) -> String {
    use std::fmt::Write;
    // The key's first 24 bytes (48 hex digits) after as much of the table name as fits.
    let mut name: String = table.chars().take(64 - 49).collect();
    name.push(':');
    for byte in &key.0[..24] {
        let _ = write!(name, "{byte:02x}");
    }
    name
}

/// Holds taken in this process, where the database keeps none (SQLite).
pub(crate) mod in_process {
    use super::*;

    /// A table and a storage key's bytes.
    type Held = HashSet<(String, [u8; 32])>;

    static HELD: Mutex<Option<Held>> = Mutex::new(None);

    /// Takes the hold of `key` in `table`: `false` if this process holds it already.
    #[cfg(feature = "sqlite")]
    pub(crate) fn take(table: &str, key: &StorageKey) -> bool {
        let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        held.get_or_insert_with(HashSet::new)
            .insert((table.to_owned(), key.0))
    }

    /// Gives the hold of `key` in `table` back.
    pub(crate) fn give_back(table: &str, key: &StorageKey) {
        let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(held) = held.as_mut() {
            held.remove(&(table.to_owned(), key.0));
        }
    }
}
