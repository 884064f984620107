//! What [`SqlStore`] does: its settings, migration and listing, and the [`Store`] and
//! [`TxStore`] it is on every [`Dialect`].

use std::sync::Arc;
use std::time::Duration;

use sqlx::Pool;

use super::ListFilter;
use super::common::{Settings, map_err, owned, token_param, validate_identifier};
use super::dialect::sealed::Order;
use super::dialect::{Dialect, SqlStore};
use super::tx::{InTransaction, TxClaim, TxClaimRequest, TxLease, TxStore, previous_request};
use idempotency_core::{
    Claim, ClaimId, ClaimRequest, CompleteRequest, FencingToken, Fingerprint, Outcome, Record,
    StorageKey, Store, StoreError, TouchRequest,
};

impl<D: Dialect> SqlStore<D> {
    /// A store on `pool`, table `idempotency_records`. Call [`migrate`](Self::migrate) once.
    pub fn new(pool: Pool<D>) -> Self {
        let settings = Settings::default();
        let sql = Arc::new(D::statements(&settings.table));
        Self {
            pool,
            settings,
            sql,
        }
    }

    /// Uses another table (its indexes, and PostgreSQL's token sequence, are named after it).
    /// Names that are not plain identifiers are refused with [`StoreError::Config`].
    pub fn with_table_name(mut self, table: &str) -> Result<Self, StoreError> {
        validate_identifier(table)?;
        self.settings.table = table.to_owned();
        self.sql = Arc::new(D::statements(table));
        Ok(self)
    }

    /// The lease of transactional claims (default 60 s): how long a record committed without
    /// completion blocks the key before it may be taken over.
    pub fn with_tx_lease(mut self, lease: Duration) -> Self {
        self.settings.tx_lease = lease;
        self
    }

    /// How long outcomes completed in a transaction are kept (default 24 h).
    pub fn with_tx_ttl(mut self, ttl: Duration) -> Self {
        self.settings.tx_ttl = ttl;
        self
    }

    /// What a transactional claim does while another transaction's uncommitted claim holds
    /// its key (default: wait up to [`DEFAULT_IN_FLIGHT_WAIT`](idempotency_core::DEFAULT_IN_FLIGHT_WAIT),
    /// 5 s, then [`TxClaim::InFlight`]).
    pub fn with_tx_in_flight(mut self, policy: idempotency_core::InFlightPolicy) -> Self {
        self.settings.tx_in_flight = policy;
        self
    }

    /// Transactional claims also take, first, the key the previous key derivation gave them
    /// ([`TxStore::reads_previous_keys`]): on for one TTL after deploying a release that
    /// changed how a mechanism's keys are derived (see [`Mechanism`](idempotency_core::Mechanism)), while
    /// the fleet runs both and until the records the previous release wrote have expired.
    pub fn with_previous_keys(mut self, enabled: bool) -> Self {
        self.settings.previous_keys = enabled;
        self
    }

    /// How long [`purge_expired`](Store::purge_expired) keeps an in-progress record after its
    /// lease ended (default [`DEFAULT_ABANDONED_GRACE`](idempotency_core::DEFAULT_ABANDONED_GRACE), 1 h;
    /// at most ten years), so the claim after a crash reports the takeover.
    pub fn with_abandoned_grace(mut self, grace: Duration) -> Self {
        self.settings.set_abandoned_grace(grace);
        self
    }

    /// The TTL this table is configured with: [`migrate`](Self::migrate) records it in
    /// [`SCHEMA_TABLE`](super::SCHEMA_TABLE), and no purge of the table ([`purge_expired`](Store::purge_expired),
    /// [`spawn_sweeper`](idempotency_core::spawn_sweeper), the operations' purge, `idempotency purge`)
    /// deletes a record last written less than this long ago, whatever TTL it was completed
    /// with (an outcome completed by hand with a shorter one, say) or grace it was abandoned
    /// under; stores on the table that set none, in other processes too, keep to it. Not set
    /// (the default): a record goes when its own expiry says. Set it on the SQL truth of a
    /// two-tier consumer to the truth's TTL.
    pub fn with_table_ttl(mut self, ttl: Duration) -> Self {
        self.settings.table_ttl = Some(ttl);
        self
    }

    /// The least age (since its last write) of a record a purge deletes: the TTL this store,
    /// or any store that migrated the table, configured the table with.
    pub(super) async fn floor(&self) -> Result<Duration, StoreError> {
        let recorded = D::recorded_ttl(self).await?;
        Ok(recorded.max(self.settings.table_ttl.unwrap_or(Duration::ZERO)))
    }

    /// The table name.
    pub fn table_name(&self) -> &str {
        &self.settings.table
    }

    /// The pool.
    pub fn pool(&self) -> &Pool<D> {
        &self.pool
    }

    /// Brings the table and its indexes (expiry; namespace + state + `updated_at`) to this
    /// release's schema version, creating them if missing (versions are kept in
    /// [`SCHEMA_TABLE`](super::SCHEMA_TABLE)). Safe to run concurrently (serialized by a lock),
    /// and quiet when the table is up to date.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        debug_assert_eq!(
            self.sql.steps.len(),
            super::SCHEMA_VERSION as usize,
            "one step per version"
        );
        D::migrate(self).await
    }

    /// Records for reconciliation, oldest `updated_at` first.
    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<Record>, StoreError> {
        self.records(filter, Order::Updated).await
    }

    /// The table's records under `filter`, in `order`.
    pub(super) async fn records(
        &self,
        filter: &ListFilter,
        order: Order<'_>,
    ) -> Result<Vec<Record>, StoreError> {
        let select = &self.sql.select_records;
        D::records(&self.pool, select, filter, order, D::LIST_TIME).await
    }

    /// The SQL text of one of the store's statements by name (`claim`, `upsert`, `read`,
    /// `complete`, `get`, as the database has them), for benchmarks that run the identical
    /// statements through raw sqlx (feature `testing`).
    #[cfg(feature = "testing")]
    pub fn statement(&self, name: &str) -> Option<&str> {
        D::statement(&self.sql, name)
    }

    /// Deletes an owned in-progress record on `conn`.
    pub(super) async fn release_on(
        &self,
        conn: &mut D::Connection,
        key: &StorageKey,
        token: FencingToken,
    ) -> Result<(), StoreError> {
        owned(D::fenced(conn, &self.sql.release, key, token_param(token)?).await?)
    }
}

impl<D: Dialect> Store for SqlStore<D> {
    async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        let mut conn = self.pool.acquire().await.map_err(map_err)?;
        D::claim_on(self, &mut conn, request).await
    }

    async fn complete(&self, request: CompleteRequest<'_>) -> Result<(), StoreError> {
        let mut conn = self.pool.acquire().await.map_err(map_err)?;
        D::complete_on(
            self,
            &mut conn,
            request.key,
            request.token,
            request.outcome,
            request.ttl,
        )
        .await
    }

    async fn release(&self, key: &StorageKey, token: FencingToken) -> Result<(), StoreError> {
        let mut conn = self.pool.acquire().await.map_err(map_err)?;
        self.release_on(&mut conn, key, token).await
    }

    async fn undo_claim(&self, key: &StorageKey, claim_id: ClaimId) -> Result<bool, StoreError> {
        Ok(D::of_claimer(&self.pool, &self.sql.undo, key, claim_id).await? > 0)
    }

    async fn touch(&self, request: TouchRequest<'_>) -> Result<(), StoreError> {
        let TouchRequest { key, token, lease } = request;
        D::touch(self, key, token, lease).await
    }

    async fn get(&self, key: &StorageKey) -> Result<Option<Record>, StoreError> {
        D::record(&self.pool, &self.sql.get, key).await
    }

    async fn purge_expired(&self, limit: usize) -> Result<u64, StoreError> {
        D::purge(self, limit).await
    }

    async fn mark_conflict(&self, key: &StorageKey) -> Result<bool, StoreError> {
        D::mark(&self.pool, &self.sql.mark_conflict, key).await
    }

    async fn wake_ups(&self, key: &StorageKey) -> Option<tokio::sync::watch::Receiver<()>> {
        D::wake_ups(self, key).await
    }
}

impl<D: Dialect> TxStore for SqlStore<D> {
    type Database = D;

    fn pool(&self) -> &Pool<D> {
        &self.pool
    }

    async fn begin(&self) -> Result<sqlx::Transaction<'static, D>, StoreError> {
        match D::BEGIN {
            Some(statement) => self.pool.begin_with(statement).await,
            None => self.pool.begin().await,
        }
        .map_err(map_err)
    }

    fn tx_request<'a>(
        &self,
        namespace: &'a str,
        key: &'a StorageKey,
        fingerprint: &'a Fingerprint,
    ) -> TxClaimRequest<'a> {
        TxClaimRequest {
            key,
            namespace,
            fingerprint,
            lease: self.settings.tx_lease,
            ttl: self.settings.tx_ttl,
            in_flight: self.settings.tx_in_flight,
            mechanism: None,
            key_derivation: Some(crate::derivation::CURRENT),
            previous_key: None,
        }
    }

    async fn claim_storage_key_in_tx<T: InTransaction<D> + ?Sized>(
        &self,
        tx: &mut T,
        request: TxClaimRequest<'_>,
    ) -> Result<TxClaim, StoreError> {
        let Some(previous_key) = request.previous_key else {
            return D::claim_in_tx_on(self, tx.connection(), request).await;
        };
        // Previous keys read (`with_previous_keys`): the previous derivation's key first,
        // where nodes of the previous release claim, then this release's own.
        let older = previous_request(&request, previous_key);
        let older = match D::claim_in_tx_on(self, tx.connection(), older).await? {
            TxClaim::Execute(lease) => lease,
            answered => return Ok(answered),
        };
        let own = TxClaimRequest {
            previous_key: None,
            ..request
        };
        match D::claim_in_tx_on(self, tx.connection(), own).await? {
            TxClaim::Execute(mut lease) => {
                lease.previous = Some(Box::new(older));
                Ok(TxClaim::Execute(lease))
            }
            answered => {
                // Given back in case the caller commits; a transaction its wait aborted
                // (PostgreSQL) rolls back whole anyway.
                let _ = self
                    .release_on(tx.connection(), &older.key, older.lease.token)
                    .await;
                Ok(answered)
            }
        }
    }

    fn reads_previous_keys(&self) -> bool {
        self.settings.previous_keys
    }

    async fn complete_in_tx<T: InTransaction<D> + ?Sized>(
        &self,
        tx: &mut T,
        lease: TxLease,
        outcome: &Outcome,
    ) -> Result<(), StoreError> {
        // The previous derivation's key first, then this release's own (`with_previous_keys`).
        for lease in lease.previous.as_deref().into_iter().chain([&lease]) {
            D::complete_in_tx_on(self, tx.connection(), lease, outcome).await?;
        }
        Ok(())
    }

    async fn record_storage_key_in_tx<T: InTransaction<D> + ?Sized>(
        &self,
        tx: &mut T,
        request: TxClaimRequest<'_>,
        outcome: &Outcome,
    ) -> Result<Option<TxClaim>, StoreError> {
        // With previous keys read, both keys are claimed as a claim takes them.
        if request.previous_key.is_none()
            && D::insert_recorded_on(self, tx.connection(), request, outcome).await?
        {
            return Ok(None);
        }
        crate::tx::claimed_and_completed(self, tx, request, outcome).await
    }

    async fn release_in_tx<T: InTransaction<D> + ?Sized>(
        &self,
        tx: &mut T,
        lease: TxLease,
    ) -> Result<(), StoreError> {
        for lease in lease.previous.as_deref().into_iter().chain([&lease]) {
            self.release_on(tx.connection(), &lease.key, lease.lease.token)
                .await?;
        }
        Ok(())
    }
}
