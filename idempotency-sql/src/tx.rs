//! Transactional dedup: the record is claimed and completed inside the caller's transaction.

use std::future::Future;
use std::time::Duration;

use crate::derivation;
use idempotency_core::{
    Error, Fingerprint, IdempotencyKey, InFlightPolicy, Lease, Mechanism, Outcome, Scope,
    StorageKey, Store,
};

/// A transaction that transactional claims run in: a `sqlx::Transaction`, or the transaction
/// that transactional HTTP hands a handler. Only transactions implement it, so a dedup record
/// is never written outside one.
///
/// Library calls take the transaction (`&mut tx`); sqlx queries take its connection
/// (`&mut *tx`), as with sqlx itself.
pub trait InTransaction<DB: sqlx::Database>: Send {
    /// The transaction's connection.
    fn connection(&mut self) -> &mut DB::Connection;
}

impl<DB: sqlx::Database> InTransaction<DB> for sqlx::Transaction<'_, DB> {
    fn connection(&mut self) -> &mut DB::Connection {
        self
    }
}

/// What [`TxStore::claim_storage_key_in_tx`] is asked to take, and how.
#[derive(Clone, Copy, Debug)]
pub struct TxClaimRequest<'a> {
    /// The hashed, scoped key.
    pub key: &'a StorageKey,
    /// The scope's namespace, kept in the clear for reconciliation.
    pub namespace: &'a str,
    /// What the key is used with this time.
    pub fingerprint: &'a Fingerprint,
    /// How long a record committed without completion blocks the key before it may be taken
    /// over (as after a crash).
    pub lease: Duration,
    /// How long the completed outcome is kept.
    pub ttl: Duration,
    /// What to do while another transaction's uncommitted claim holds the key.
    pub in_flight: InFlightPolicy,
    /// The front end claiming, kept with the record ([`Record::mechanism`](idempotency_core::Record)).
    pub mechanism: Option<Mechanism>,
    /// The version of the key derivation that derived `key`, kept with the record
    /// ([`Record::key_derivation`](idempotency_core::Record)).
    pub key_derivation: Option<u8>,
    /// The key the previous key derivation gave the same claim, claimed first while previous
    /// keys are read ([`TxStore::reads_previous_keys`]); `None` otherwise.
    pub previous_key: Option<&'a StorageKey>,
}

/// What [`TxStore::claim_in_tx`] found.
#[derive(Debug)]
#[must_use = "a claim must be acted on: run the business code only on `Execute`"]
pub enum TxClaim {
    /// This transaction owns the key: do the business writes in the same transaction, then
    /// [`TxStore::complete_in_tx`] and commit.
    Execute(TxLease),
    /// A duplicate of committed work: answer with this stored outcome, run nothing.
    Replay(Outcome),
    /// Another owner holds the key: its transaction had not committed within the in-flight
    /// wait, or a committed claim still holds a live lease. On PostgreSQL the transaction can
    /// no longer be used (the bounded wait aborted it): roll it back.
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
    pub(crate) ttl: Duration,
    /// The claim of the previous derivation's key taken with it
    /// ([`TxStore::reads_previous_keys`]), completed first and released with it.
    pub(crate) previous: Option<Box<TxLease>>,
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
/// uncommitted row (the primary key), up to the request's [`InFlightPolicy`]: if the first
/// commits, the second gets [`TxClaim::Replay`]; if it rolls back, [`TxClaim::Execute`]; if it
/// is still running at the bound, [`TxClaim::InFlight`]. Exactly one runs the business code.
///
/// | database | wait bound | reject now |
/// |---|---|---|
/// | PostgreSQL | `lock_timeout`, set and restored inside the claim statement | `lock_timeout` of 1 ms |
/// | MariaDB | `SET STATEMENT innodb_lock_wait_timeout = s FOR …` (whole seconds, rounded down) | `innodb_lock_wait_timeout = 0` |
/// | MySQL 8 | the session's `innodb_lock_wait_timeout` (default 50 s; set it on the pool) | not available |
/// | SQLite | the connection's busy timeout, at `BEGIN IMMEDIATE` ([`begin`](Self::begin)) | not available: SQLite only waits |
///
/// Begin transactions with [`begin`](Self::begin) (SQLite needs `BEGIN IMMEDIATE` so that the
/// claim's write cannot be refused). A transient error ([`Error::is_transient`]: a deadlock, a
/// lost connection) means the database aborted the transaction: roll it back and retry it
/// whole. Use `READ COMMITTED` (the PostgreSQL default) on PostgreSQL; on MySQL the claim reads
/// with `FOR UPDATE`, so `REPEATABLE READ` (its default) works too.
///
/// ```no_run
/// # #[cfg(feature = "postgres")]
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// use idempotency_sql::{PostgresStore, TxClaim, TxStore};
/// use idempotency_core::{Fingerprint, IdempotencyKey, Outcome, Scope};
///
/// let store = PostgresStore::new(pool.clone());
/// store.migrate().await?;
/// let (scope, key) = (Scope::new("pay.callback"), IdempotencyKey::parse("T1")?);
/// let fingerprint = Fingerprint::of_bytes(b"order 42 paid");
///
/// let mut tx = store.begin().await?;
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
pub trait TxStore: Store + Clone {
    /// The database the transactions belong to.
    type Database: sqlx::Database;

    /// The pool the store's records live in.
    fn pool(&self) -> &sqlx::Pool<Self::Database>;

    /// Begins a transaction fit for a transactional claim (`BEGIN IMMEDIATE` on SQLite).
    fn begin(
        &self,
    ) -> impl Future<Output = Result<sqlx::Transaction<'static, Self::Database>, Error>> + Send;

    /// A claim request for an already hashed key with the store's transactional settings:
    /// `with_tx_lease` (default 60 s), `with_tx_ttl` (24 h) and `with_tx_in_flight` (wait 5 s);
    /// the key derived by this release, no mechanism named, no previous key.
    fn tx_request<'a>(
        &self,
        namespace: &'a str,
        key: &'a StorageKey,
        fingerprint: &'a Fingerprint,
    ) -> TxClaimRequest<'a>;

    /// Whether claims also take, first, the key the previous key derivation gave them (the SQL
    /// stores' `with_previous_keys`), so that a fleet running the previous release and this
    /// one side by side never runs one twice, and records the previous release wrote are
    /// replayed: on for one TTL after a release that changed a derivation (see
    /// [`Mechanism`]). Default off.
    fn reads_previous_keys(&self) -> bool {
        false
    }

    /// Claims an already hashed key inside `tx` (and, first, `request.previous_key` if set).
    fn claim_storage_key_in_tx<T: InTransaction<Self::Database> + ?Sized>(
        &self,
        tx: &mut T,
        request: TxClaimRequest<'_>,
    ) -> impl Future<Output = Result<TxClaim, Error>> + Send;

    /// Stores the outcome inside `tx` (kept for the claim's TTL once committed). Fails with
    /// [`Error::LeaseLost`] if the record is no longer this lease's.
    fn complete_in_tx<T: InTransaction<Self::Database> + ?Sized>(
        &self,
        tx: &mut T,
        lease: TxLease,
        outcome: &Outcome,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// Deletes the claim inside `tx`, for a transaction that commits other writes but wants the
    /// key to run again on retry. (To undo everything, roll the transaction back instead.)
    fn release_in_tx<T: InTransaction<Self::Database> + ?Sized>(
        &self,
        tx: &mut T,
        lease: TxLease,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// Claims `key` in `scope` inside `tx` ([`Mechanism::Transaction`]), with the store's
    /// transactional settings.
    fn claim_in_tx<T: InTransaction<Self::Database> + ?Sized>(
        &self,
        tx: &mut T,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
    ) -> impl Future<Output = Result<TxClaim, Error>> + Send {
        let keyed = KeyedClaim::new(self, scope, Mechanism::Transaction, key.as_str());
        let fingerprint = *fingerprint;
        async move {
            let request = keyed.request(self, &fingerprint);
            self.claim_storage_key_in_tx(tx, request).await
        }
    }

    /// Claims `key` of the front end of `mechanism` in `scope` inside `tx`, with the store's
    /// transactional settings, its completed record kept for `ttl` (the store's `with_tx_ttl`
    /// if `None`): the key this release derives for it, and first, while previous keys are
    /// read, the previous derivation's.
    fn claim_key_in_tx<T: InTransaction<Self::Database> + ?Sized>(
        &self,
        tx: &mut T,
        scope: &Scope,
        mechanism: Mechanism,
        key: &str,
        fingerprint: &Fingerprint,
        ttl: Option<Duration>,
    ) -> impl Future<Output = Result<TxClaim, Error>> + Send {
        let keyed = KeyedClaim::new(self, scope, mechanism, key);
        let fingerprint = *fingerprint;
        async move {
            let request = keyed.request_with_ttl(self, &fingerprint, ttl);
            self.claim_storage_key_in_tx(tx, request).await
        }
    }

    /// Writes the record of `key` of the front end of `mechanism` in `scope` inside `tx`, at
    /// the end of the transaction: after its business writes, completed with `outcome` and kept
    /// for `ttl` (the store's `with_tx_ttl` if `None`), as a dedup row the business code's
    /// transaction inserts last. `None`: written, commit `tx`. Otherwise the key has a record
    /// and this is what a claim found ([`TxClaim::Replay`], [`TxClaim::InFlight`] or
    /// [`TxClaim::Mismatch`], never `Execute`): roll `tx` back and answer with it.
    ///
    /// For work that a claim made before it runs already keeps from running twice, where that
    /// claim cannot tell whether the work committed (a queue's fast tier): the business code
    /// runs before the record is checked, so a concurrent duplicate that got this far runs it
    /// too, and the record's unique key commits one of them (the other waits on it, then rolls
    /// back). PostgreSQL writes a new key's record in one `INSERT … ON CONFLICT DO NOTHING`,
    /// whose wait on such a copy is bounded by the session's `lock_timeout` only (that copy is
    /// at its own end, or running the same work); elsewhere the claim's bounded wait applies.
    #[allow(clippy::too_many_arguments)]
    fn record_in_tx<T: InTransaction<Self::Database> + ?Sized>(
        &self,
        tx: &mut T,
        scope: &Scope,
        mechanism: Mechanism,
        key: &str,
        fingerprint: &Fingerprint,
        ttl: Option<Duration>,
        outcome: &Outcome,
    ) -> impl Future<Output = Result<Option<TxClaim>, Error>> + Send {
        let keyed = KeyedClaim::new(self, scope, mechanism, key);
        let fingerprint = *fingerprint;
        async move {
            let request = keyed.request_with_ttl(self, &fingerprint, ttl);
            self.record_storage_key_in_tx(tx, request, outcome).await
        }
    }

    /// [`record_in_tx`](Self::record_in_tx) for an already hashed key: claimed, and completed
    /// at once when taken, unless the store writes it in one statement.
    fn record_storage_key_in_tx<T: InTransaction<Self::Database> + ?Sized>(
        &self,
        tx: &mut T,
        request: TxClaimRequest<'_>,
        outcome: &Outcome,
    ) -> impl Future<Output = Result<Option<TxClaim>, Error>> + Send {
        claimed_and_completed(self, tx, request, outcome)
    }
}

/// [`TxStore::record_storage_key_in_tx`] as a claim, then the completion once taken.
pub(crate) async fn claimed_and_completed<S, T>(
    store: &S,
    tx: &mut T,
    request: TxClaimRequest<'_>,
    outcome: &Outcome,
) -> Result<Option<TxClaim>, Error>
where
    S: TxStore,
    T: InTransaction<S::Database> + ?Sized,
{
    match store.claim_storage_key_in_tx(tx, request).await? {
        TxClaim::Execute(lease) => {
            store.complete_in_tx(tx, lease, outcome).await?;
            Ok(None)
        }
        found => Ok(Some(found)),
    }
}

/// The keys of one claim in a transaction: this release's, and the previous derivation's
/// while the store reads previous keys.
pub(crate) struct KeyedClaim {
    namespace: String,
    mechanism: Mechanism,
    key: StorageKey,
    previous: Option<StorageKey>,
}

impl KeyedClaim {
    pub(crate) fn new<S: TxStore>(
        store: &S,
        scope: &Scope,
        mechanism: Mechanism,
        key: &str,
    ) -> Self {
        let previous = derivation::previous(mechanism)
            .filter(|_| store.reads_previous_keys())
            .map(|(_, keyed_as)| scope.storage_key_for(keyed_as, key));
        Self {
            namespace: scope.namespace().to_owned(),
            mechanism,
            key: scope.storage_key_for(mechanism, key),
            previous,
        }
    }

    pub(crate) fn request<'a, S: TxStore>(
        &'a self,
        store: &S,
        fingerprint: &'a Fingerprint,
    ) -> TxClaimRequest<'a> {
        TxClaimRequest {
            mechanism: Some(self.mechanism),
            key_derivation: Some(derivation::CURRENT),
            previous_key: self.previous.as_ref(),
            ..store.tx_request(&self.namespace, &self.key, fingerprint)
        }
    }

    /// [`request`](Self::request), its completed record kept for `ttl` (the store's if
    /// `None`).
    pub(crate) fn request_with_ttl<'a, S: TxStore>(
        &'a self,
        store: &S,
        fingerprint: &'a Fingerprint,
        ttl: Option<Duration>,
    ) -> TxClaimRequest<'a> {
        let mut request = self.request(store, fingerprint);
        if let Some(ttl) = ttl {
            request.ttl = ttl;
        }
        request
    }
}

/// The request of the claim of `request.previous_key`: the same claim, under the previous
/// derivation of its mechanism's keys.
pub(crate) fn previous_request<'a>(
    request: &TxClaimRequest<'a>,
    previous_key: &'a StorageKey,
) -> TxClaimRequest<'a> {
    let derivation = request
        .mechanism
        .and_then(derivation::previous)
        .map(|(version, _)| version);
    TxClaimRequest {
        key: previous_key,
        key_derivation: derivation,
        previous_key: None,
        ..*request
    }
}

/// The store claim of a transactional `request`, under a fresh claim id: never undone, as a
/// claim in a transaction that fails is rolled back with it.
#[cfg(any(feature = "mysql", feature = "sqlite"))]
pub(crate) fn store_request<'a>(
    request: &TxClaimRequest<'a>,
) -> idempotency_core::ClaimRequest<'a> {
    idempotency_core::ClaimRequest {
        key: request.key,
        namespace: request.namespace,
        fingerprint: request.fingerprint,
        lease: request.lease,
        claim_id: idempotency_core::ClaimId::random(),
        mechanism: request.mechanism,
        key_derivation: request.key_derivation,
    }
}

/// Turns a store claim into a transactional one.
pub(crate) fn tx_claim(claim: idempotency_core::Claim, request: &TxClaimRequest<'_>) -> TxClaim {
    match claim {
        idempotency_core::Claim::Acquired(lease) => TxClaim::Execute(TxLease {
            key: *request.key,
            lease,
            ttl: request.ttl,
            previous: None,
        }),
        idempotency_core::Claim::Completed(outcome) => TxClaim::Replay(outcome),
        idempotency_core::Claim::InProgress { lease_remaining } => TxClaim::InFlight {
            retry_after: retry_hint(lease_remaining),
        },
        idempotency_core::Claim::Mismatch => TxClaim::Mismatch,
    }
}

/// The retry hint of an in-flight answer: the lease left, between 1 and 5 s.
pub(crate) fn retry_hint(lease_remaining: Duration) -> Duration {
    lease_remaining.clamp(Duration::from_secs(1), Duration::from_secs(5))
}

/// The in-flight answer of a claim whose bounded wait on another transaction ran out (a row
/// lock's: PostgreSQL and MySQL; SQLite's one writer waits in its busy timeout instead).
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) fn still_running() -> TxClaim {
    TxClaim::InFlight {
        retry_after: Duration::from_secs(1),
    }
}
