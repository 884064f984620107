//! The SQL stores (features `postgres`, `mysql`, `sqlite`): record tables with their audit
//! table, and outbox tables.

use std::sync::Arc;
use std::time::Duration;

use idempotency_operations::{AuditLog, Operations, TracingAudit};
use idempotency_outbox::Outbox;
use idempotency_outbox::table::DEFAULT_OUTBOX_TABLE;
use idempotency_sql::{Dialect, SqlAudit, SqlStore};
use sqlx::Pool;

use crate::args::Global;
use crate::failure::{Failure, sqlx_failure};
use crate::store::{Audited, Kind, kind_of, not_built_for, store_url};

/// How long connecting to a store may take before it counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The record table when `--table` is not given.
const DEFAULT_RECORD_TABLE: &str = "idempotency_records";

/// A store and the audit log its actions go to.
type Connected = (Arc<dyn Operations>, Arc<dyn AuditLog>);

/// The PostgreSQL store at `url`.
#[cfg(feature = "postgres")]
pub(crate) async fn postgres(
    url: &str,
    global: &Global,
    audited: Audited,
    grace: Duration,
) -> Result<Connected, Failure> {
    let pool = sqlx::postgres::PgPoolOptions::new();
    let pool = pool.max_connections(2).acquire_timeout(CONNECT_TIMEOUT);
    let store = idempotency_sql::PostgresStore::new(pool.connect(url).await.map_err(sqlx_failure)?);
    sql(store, global, audited, grace).await
}

/// The MySQL/MariaDB store at `url`.
#[cfg(feature = "mysql")]
pub(crate) async fn mysql(
    url: &str,
    global: &Global,
    audited: Audited,
    grace: Duration,
) -> Result<Connected, Failure> {
    let pool = sqlx::mysql::MySqlPoolOptions::new();
    let pool = pool.max_connections(2).acquire_timeout(CONNECT_TIMEOUT);
    let store = idempotency_sql::MySqlStore::new(pool.connect(url).await.map_err(sqlx_failure)?);
    sql(store, global, audited, grace).await
}

/// The SQLite store at `url`.
#[cfg(feature = "sqlite")]
pub(crate) async fn sqlite(
    url: &str,
    global: &Global,
    audited: Audited,
    grace: Duration,
) -> Result<Connected, Failure> {
    let pool = sqlx::sqlite::SqlitePoolOptions::new();
    let pool = pool.max_connections(2).acquire_timeout(CONNECT_TIMEOUT);
    let store = idempotency_sql::SqliteStore::new(pool.connect(url).await.map_err(sqlx_failure)?);
    sql(store, global, audited, grace).await
}

/// The outbox table of a SQL store.
pub(crate) enum OutboxStore {
    /// On PostgreSQL.
    #[cfg(feature = "postgres")]
    Postgres(Outbox<sqlx::Postgres>),
    /// On MySQL/MariaDB.
    #[cfg(feature = "mysql")]
    MySql(Outbox<sqlx::MySql>),
    /// On SQLite.
    #[cfg(feature = "sqlite")]
    Sqlite(Outbox<sqlx::Sqlite>),
}

/// The outbox table `--outbox-table` (default `idempotency_outbox`) in the database of
/// `--store`; not migrated: the services own it.
pub(crate) async fn connect_outbox(global: &Global) -> Result<OutboxStore, Failure> {
    let url = store_url(global)?;
    let table = global
        .outbox_table
        .as_deref()
        .unwrap_or(DEFAULT_OUTBOX_TABLE);
    Ok(match kind_of(url)? {
        Kind::Redis | Kind::RedisCluster => {
            return Err(Failure::Usage(
                "the outbox lives in a SQL database: --store postgres://, mysql:// or sqlite://"
                    .to_owned(),
            ));
        }
        #[cfg(feature = "postgres")]
        Kind::Postgres => {
            let pool = sqlx::postgres::PgPoolOptions::new();
            let pool = pool.max_connections(2).acquire_timeout(CONNECT_TIMEOUT);
            let pool = pool.connect(url).await.map_err(sqlx_failure)?;
            OutboxStore::Postgres(Outbox::postgres(pool).with_table_name(table)?)
        }
        #[cfg(feature = "mysql")]
        Kind::MySql => {
            let pool = sqlx::mysql::MySqlPoolOptions::new();
            let pool = pool.max_connections(2).acquire_timeout(CONNECT_TIMEOUT);
            let pool = pool.connect(url).await.map_err(sqlx_failure)?;
            OutboxStore::MySql(Outbox::mysql(pool).with_table_name(table)?)
        }
        #[cfg(feature = "sqlite")]
        Kind::Sqlite => {
            let pool = sqlx::sqlite::SqlitePoolOptions::new();
            let pool = pool.max_connections(2).acquire_timeout(CONNECT_TIMEOUT);
            let pool = pool.connect(url).await.map_err(sqlx_failure)?;
            OutboxStore::Sqlite(Outbox::sqlite(pool).with_table_name(table)?)
        }
        #[allow(unreachable_patterns)]
        other => return Err(not_built_for(other)),
    })
}

/// The record table of `--table` (or IDEMPOTENCY_TABLE), the default otherwise.
pub(crate) fn record_table(global: &Global) -> &str {
    global.table.as_deref().unwrap_or(DEFAULT_RECORD_TABLE)
}

/// The SQL audit table of operator actions on `pool`: `--audit-table` (or
/// IDEMPOTENCY_AUDIT_TABLE), else the one that goes with the record table; created if
/// missing.
pub(crate) async fn sql_audit<D: Dialect>(
    pool: Pool<D>,
    global: &Global,
) -> Result<SqlAudit<D>, Failure> {
    let audit = match &global.audit_table {
        Some(table) => SqlAudit::new(pool, table)?,
        None => SqlAudit::for_records(pool, record_table(global))?,
    };
    audit.migrate().await?;
    Ok(audit)
}

/// A SQL store on `--table`, and its audit table if actions need one.
async fn sql<D>(
    store: SqlStore<D>,
    global: &Global,
    audited: Audited,
    grace: Duration,
) -> Result<Connected, Failure>
where
    D: Dialect,
    SqlStore<D>: Operations,
{
    let store = store
        .with_table_name(record_table(global))?
        .with_abandoned_grace(grace);
    let audit: Arc<dyn AuditLog> = match audited {
        Audited::Yes => Arc::new(sql_audit(store.pool().clone(), global).await?),
        Audited::No => Arc::new(TracingAudit),
    };
    Ok((Arc::new(store), audit))
}
