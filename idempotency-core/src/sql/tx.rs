//! Transactional dedup: the record is claimed and completed inside the caller's transaction.

use std::future::Future;
use std::time::Duration;

use crate::{Fingerprint, IdempotencyKey, Lease, Outcome, Scope, StorageKey, Store, StoreError};

/// What [`TxStore::claim_in_tx`] found.
#[derive(Debug)]
#[must_use = "a claim must be acted on: run the business code only on `Execute`"]
pub enum TxClaim {
    /// This transaction owns the key: do the business writes in the same transaction, then
    /// [`TxStore::complete_in_tx`] and commit.
    Execute(TxLease),
    /// A duplicate of committed work: answer with this stored outcome, run nothing.
    Replay(Outcome),
    /// A committed, still live claim of another owner holds the key (for example one taken by
    /// [`crate::Idempotency`] outside a transaction).
    InFlight {
        /// A hint for when to retry.
        retry_after: Duration,
    },
    /// The key was used with another payload.
    Mismatch,
}

/// Ownership of a key inside one transaction.
///
/// It becomes visible to others only when the transaction commits, together with the business
/// writes; a rolled back (or dropped) transaction leaves no trace. Committing without
/// [`TxStore::complete_in_tx`] leaves an in-progress record that is taken over once its lease
/// ends, as after a crash.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "complete the lease in the transaction before committing"]
pub struct TxLease {
    pub(crate) key: StorageKey,
    pub(crate) lease: Lease,
}

impl TxLease {
    /// The hashed key.
    pub fn key(&self) -> &StorageKey {
        &self.key
    }

    /// The lease (fencing token, attempt number, whether it took over a crashed owner).
    pub fn lease(&self) -> Lease {
        self.lease
    }
}

/// A store that can claim and complete keys inside a caller's `sqlx` transaction, so the dedup
/// record and the business writes commit or roll back together (the iron rule: same database,
/// same transaction).
///
/// With concurrent transactions on one key, the second one's claim waits on the first one's
/// uncommitted row (the primary key): if the first commits, the second gets
/// [`TxClaim::Replay`]; if it rolls back, the second gets [`TxClaim::Execute`]. Exactly one
/// runs the business code.
///
/// Waiting duplicates hold a connection until the first transaction ends: keep these
/// transactions short, and bound the wait where needed (PostgreSQL `SET LOCAL lock_timeout`,
/// MySQL `innodb_lock_wait_timeout`, SQLite's busy timeout); a timed-out wait is an error, never
/// a second execution. A transient error ([`StoreError::is_transient`]: a deadlock, a lost
/// connection) means the database aborted the transaction: roll it back and retry it whole.
/// Use `READ COMMITTED` (the PostgreSQL default) on PostgreSQL; on MySQL
/// the claim reads with `FOR UPDATE`, so `REPEATABLE READ` (its default) works too.
///
/// ```no_run
/// # #[cfg(feature = "postgres")]
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// use idempotency_core::sql::{PostgresStore, TxClaim, TxStore};
/// use idempotency_core::{Fingerprint, IdempotencyKey, Outcome, Scope};
///
/// let store = PostgresStore::new(pool.clone());
/// store.migrate().await?;
/// let (scope, key) = (Scope::new("pay.callback"), IdempotencyKey::parse("T1")?);
/// let fingerprint = Fingerprint::of_bytes(b"order 42 paid");
///
/// let mut tx = pool.begin().await?;
/// match store.claim_in_tx(&mut tx, &scope, &key, &fingerprint).await? {
///     TxClaim::Execute(lease) => {
///         sqlx::query("INSERT INTO coupons (order_id) VALUES (42)").execute(&mut *tx).await?;
///         store.complete_in_tx(&mut tx, lease, &Outcome::new(200, "granted")).await?;
///         tx.commit().await?;
///     }
///     TxClaim::Replay(outcome) => println!("duplicate: {:?}", outcome.body),
///     TxClaim::InFlight { .. } | TxClaim::Mismatch => {}
/// }
/// # Ok(()) }
/// ```
pub trait TxStore: Store {
    /// The database the transactions belong to.
    type Database: sqlx::Database;

    /// Claims an already hashed key inside `tx`.
    fn claim_storage_key_in_tx(
        &self,
        tx: &mut sqlx::Transaction<'_, Self::Database>,
        namespace: &str,
        key: StorageKey,
        fingerprint: &Fingerprint,
    ) -> impl Future<Output = Result<TxClaim, StoreError>> + Send;

    /// Stores the outcome inside `tx` (kept for the store's transactional TTL once committed).
    /// Fails with [`StoreError::LeaseLost`] if the record is no longer this lease's.
    fn complete_in_tx(
        &self,
        tx: &mut sqlx::Transaction<'_, Self::Database>,
        lease: TxLease,
        outcome: &Outcome,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Deletes the claim inside `tx`, for a transaction that commits other writes but wants the
    /// key to run again on retry. (To undo everything, roll the transaction back instead.)
    fn release_in_tx(
        &self,
        tx: &mut sqlx::Transaction<'_, Self::Database>,
        lease: TxLease,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Claims `key` in `scope` inside `tx`.
    fn claim_in_tx(
        &self,
        tx: &mut sqlx::Transaction<'_, Self::Database>,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
    ) -> impl Future<Output = Result<TxClaim, StoreError>> + Send {
        self.claim_storage_key_in_tx(tx, scope.namespace(), scope.storage_key(key), fingerprint)
    }
}

/// Turns a store claim into a transactional one.
pub(crate) fn tx_claim(claim: crate::Claim, key: StorageKey) -> TxClaim {
    match claim {
        crate::Claim::Acquired(lease) => TxClaim::Execute(TxLease { key, lease }),
        crate::Claim::Completed(outcome) => TxClaim::Replay(outcome),
        crate::Claim::InProgress { lease_remaining } => TxClaim::InFlight {
            retry_after: lease_remaining.clamp(Duration::from_secs(1), Duration::from_secs(5)),
        },
        crate::Claim::Mismatch => TxClaim::Mismatch,
    }
}
