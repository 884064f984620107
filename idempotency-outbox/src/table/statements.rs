//! The statements of one outbox table, as each database writes them ([`OutboxSql`]).

/// The statements of one outbox table, built once per table name, with the parameters
/// [`shared`](super::shared) binds alike on every database: times as one bound value each,
/// statements ending in `seq IN (` taking `[time, claim]` and then the sequence numbers.
#[derive(Debug)]
pub struct OutboxSql {
    pub(crate) table: String,
    pub(crate) steps: idempotency_sql::support::Steps,
    pub(crate) enqueue: String,
    /// PostgreSQL and SQLite: the claim; MySQL: the locking read that picks the batch.
    pub(crate) claim: String,
    /// MySQL: the update that claims the picked rows, and the read of the claimed rows.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(crate) claim_update: String,
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(crate) claim_read: String,
    /// Whether claims skip rows other relays hold locked (`SKIP LOCKED`), decided by the server
    /// version on MySQL/MariaDB at the first claim.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(crate) skip_locked: std::sync::OnceLock<bool>,
    pub(crate) mark_sent: String,
    pub(crate) mark_failed: String,
    pub(crate) release: String,
    pub(crate) extend: String,
    pub(crate) next_due: String,
    /// Deletes a batch of sent messages: the time they were sent before, the limit.
    pub(crate) purge_sent: String,
    /// Selects a batch of sent messages' `seq` (same parameters), to lock and archive.
    pub(crate) purge_pick: String,
    /// Selects a batch of sent messages as [`ArchivedRow`](super::rows::ArchivedRow) reads them (same
    /// parameters), to lock and archive.
    pub(crate) purge_read: String,
    /// The archive tables this handle created (or found).
    pub(crate) archives: std::sync::Mutex<Vec<String>>,
    pub(crate) dead: String,
    pub(crate) revive: String,
    pub(crate) counts: String,
}
