//! [`SqlAudit`]: operator actions audited to a table in the store's own database.

use sqlx::Pool;

use super::common::{map_err, validate_identifier};
use super::dialect::Dialect;

use idempotency_core::{BoxFuture, StoreError};
use idempotency_operations::{AuditEntry, AuditLog};

/// An [`AuditLog`] table in the store's database: one row per operator action (`id`,
/// `at_ms` Unix milliseconds, `actor`, `reason`, `action`, `namespace`, `key_hash` (hex, never
/// the raw key), `applied` 0/1, `detail`, and `record`: the record as it was, JSON, without
/// its body). Create it with [`migrate`](Self::migrate).
///
/// ```no_run
/// # #[cfg(feature = "postgres")]
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), idempotency_core::Error> {
/// use idempotency_operations::Admin;
/// use idempotency_sql::{PostgresStore, SqlAudit};
///
/// let store = PostgresStore::new(pool.clone());
/// let audit = SqlAudit::new(pool, "idempotency_audit")?;
/// audit.migrate().await?;
/// let admin = Admin::new(store, audit);
/// # let _ = admin; Ok(()) }
/// ```
pub struct SqlAudit<D: Dialect> {
    pool: Pool<D>,
    table: String,
}

impl<D: Dialect> Clone for SqlAudit<D> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            table: self.table.clone(),
        }
    }
}

impl<D: Dialect> std::fmt::Debug for SqlAudit<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlAudit")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

impl<D: Dialect> SqlAudit<D> {
    /// The audit table `table` (a plain identifier, else [`StoreError::Config`]) on `pool`.
    pub fn new(pool: Pool<D>, table: &str) -> Result<Self, StoreError> {
        validate_identifier(table)?;
        Ok(Self {
            pool,
            table: table.to_owned(),
        })
    }

    /// The audit table that goes with the record table `records` on `pool`
    /// ([`audit_table_for`]): two services with their own record tables in one database never
    /// share an audit table by accident.
    pub fn for_records(pool: Pool<D>, records: &str) -> Result<Self, StoreError> {
        Self::new(pool, &audit_table_for(records))
    }

    /// The table's name.
    pub fn table_name(&self) -> &str {
        &self.table
    }

    fn quoted(&self) -> String {
        let (open, close) = D::QUOTE;
        format!("{open}{}{close}", self.table)
    }

    /// Creates the table if it is missing.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        let create = format!(
            "CREATE TABLE IF NOT EXISTS {} (id {}, at_ms BIGINT NOT NULL, actor TEXT NOT NULL, \
             reason TEXT NOT NULL, action VARCHAR(16) NOT NULL, namespace TEXT NULL, \
             key_hash VARCHAR(64) NULL, applied BIGINT NOT NULL, detail TEXT NOT NULL, \
             record TEXT NULL)",
            self.quoted(),
            D::SERIAL_KEY
        );
        D::run(&self.pool, &create).await
    }
}

/// A store in the same database (the same connection URL) writes each action and its entry
/// in one transaction ([`Operations::act_audited`](idempotency_operations::Operations::act_audited)).
impl<D: Dialect> AuditLog for SqlAudit<D> {
    fn write<'a>(&'a self, entry: &'a AuditEntry) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut conn = self.pool.acquire().await.map_err(map_err)?;
            D::write_audit(&mut conn, &self.quoted(), entry).await
        })
    }

    fn table_in(&self, database: &str) -> Option<&str> {
        (database_of(&self.pool) == database).then_some(self.table.as_str())
    }
}

/// The name of the audit table that goes with the record table `records`: its `_records`
/// suffix replaced by `_audit`, else `_audit` appended (`idempotency_records` →
/// `idempotency_audit`, `coupon_records` → `coupon_audit`, `orders_idem` → `orders_idem_audit`).
///
/// ```
/// use idempotency_sql::audit_table_for;
///
/// assert_eq!(audit_table_for("idempotency_records"), "idempotency_audit");
/// assert_eq!(audit_table_for("orders_idem"), "orders_idem_audit");
/// ```
pub fn audit_table_for(records: &str) -> String {
    let stem = records.strip_suffix("_records").unwrap_or(records);
    format!("{stem}_audit")
}

/// What names a pool's database: its connection URL, as sqlx renders it.
pub(super) fn database_of<D: Dialect>(pool: &Pool<D>) -> String {
    use sqlx::ConnectOptions;
    pool.connect_options().to_url_lossy().to_string()
}
