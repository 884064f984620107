//! `--store URL` to a store with operations, and the audit its actions go to.

use std::sync::Arc;
use std::time::Duration;

use idempotency_core::operations::{Admin, AuditLog, Operations, TracingAudit};
use idempotency_core::redis::RedisStore;
use idempotency_core::sql::outbox::DEFAULT_OUTBOX_TABLE;
use idempotency_core::sql::{MySqlStore, Outbox, PostgresStore, SqlAudit, SqlStore, SqliteStore};
use sqlx::Pool;

use crate::args::Global;
use crate::failure::{Failure, sqlx_failure};

/// How long connecting to a store may take before it counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The record table when `--table` is not given.
const DEFAULT_RECORD_TABLE: &str = "idempotency_records";

/// A store's kind, by its URL's scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Redis,
    RedisCluster,
    Postgres,
    MySql,
    Sqlite,
}

fn kind_of(url: &str) -> Result<Kind, Failure> {
    let scheme = url.split(':').next().unwrap_or_default();
    match scheme {
        "redis" | "rediss" if url.contains(',') => Ok(Kind::RedisCluster),
        "redis" | "rediss" => Ok(Kind::Redis),
        "postgres" | "postgresql" => Ok(Kind::Postgres),
        "mysql" | "mariadb" => Ok(Kind::MySql),
        "sqlite" => Ok(Kind::Sqlite),
        _ => Err(Failure::Usage(format!(
            "--store: unknown scheme {scheme:?} (redis://, postgres://, mysql://, sqlite://, or \
             a comma-separated list of redis:// nodes for a Cluster)"
        ))),
    }
}

/// The store's URL without its password, for messages.
pub(crate) fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((user, host)) => {
            let user = user.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}@{host}{path}")
        }
        None => url.to_owned(),
    }
}

/// A store connected to, and what its scans read, in an operator's words.
pub(crate) struct Connected {
    /// The operations.
    pub(crate) admin: Admin,
    /// `table idempotency_records of postgres://postgres@host/test`, `keys under
    /// idempotency: of redis://host:6379`.
    pub(crate) scanned: String,
    /// Whether a scan that examined nothing means the records are elsewhere (Redis: no key
    /// under the prefix); a SQL store's table is checked when connecting.
    pub(crate) nothing_is_missing: bool,
}

/// Whether operator actions need an audit log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Audited {
    /// Reads only.
    No,
    /// Actions: audited to the SQL audit table (`--audit-table`, else the one that goes with
    /// the record table; created if missing), to the log stream on Redis.
    Yes,
}

/// Operations on the store of `--store`, audited as `audited` says; `grace` is how long the
/// services keep an abandoned record after its lease ended (what a purge waits). A SQL
/// store's record table is checked first: one that does not exist, or is not a record table,
/// is a not-found failure naming it.
pub(crate) async fn connect(
    global: &Global,
    audited: Audited,
    grace: Duration,
) -> Result<Connected, Failure> {
    let url = store_url(global)?;
    let kind = kind_of(url)?;
    let (store, audit): (Arc<dyn Operations>, Arc<dyn AuditLog>) = match kind {
        Kind::Redis => {
            let store = RedisStore::connect(url).await?.with_abandoned_grace(grace);
            (
                Arc::new(store.with_key_prefix(global.prefix.clone())),
                Arc::new(TracingAudit),
            )
        }
        Kind::RedisCluster => {
            let nodes = url
                .split(',')
                .map(str::trim)
                .filter(|node| !node.is_empty());
            let store = RedisStore::connect_cluster(nodes)
                .await?
                .with_abandoned_grace(grace);
            (
                Arc::new(store.with_key_prefix(global.prefix.clone())),
                Arc::new(TracingAudit),
            )
        }
        Kind::Postgres => {
            let pool = sqlx::postgres::PgPoolOptions::new();
            let pool = pool.max_connections(2).acquire_timeout(CONNECT_TIMEOUT);
            let store = PostgresStore::new(pool.connect(url).await.map_err(sqlx_failure)?);
            sql(store, global, audited, grace).await?
        }
        Kind::MySql => {
            let pool = sqlx::mysql::MySqlPoolOptions::new();
            let pool = pool.max_connections(2).acquire_timeout(CONNECT_TIMEOUT);
            let store = MySqlStore::new(pool.connect(url).await.map_err(sqlx_failure)?);
            sql(store, global, audited, grace).await?
        }
        Kind::Sqlite => {
            let pool = sqlx::sqlite::SqlitePoolOptions::new();
            let pool = pool.max_connections(2).acquire_timeout(CONNECT_TIMEOUT);
            let store = SqliteStore::new(pool.connect(url).await.map_err(sqlx_failure)?);
            sql(store, global, audited, grace).await?
        }
    };
    let scanned = format!("{} of {}", store.source(), redacted(url));
    store
        .check_source()
        .await
        .map_err(|error| match Failure::from(error) {
            Failure::Usage(text) => Failure::NotFound(format!(
                "{text} (of {}; the service's table: --table or IDEMPOTENCY_TABLE)",
                redacted(url)
            )),
            other => other,
        })?;
    Ok(Connected {
        admin: Admin::from_shared(store, audit).with_batch(global.batch),
        scanned,
        nothing_is_missing: matches!(kind, Kind::Redis | Kind::RedisCluster),
    })
}

/// `--store`, or a usage failure.
fn store_url(global: &Global) -> Result<&str, Failure> {
    global.store.as_deref().ok_or_else(|| {
        Failure::Usage("no store: pass --store URL or set IDEMPOTENCY_STORE_URL".to_owned())
    })
}

/// The outbox table of a SQL store.
pub(crate) enum OutboxStore {
    /// On PostgreSQL.
    Postgres(Outbox<sqlx::Postgres>),
    /// On MySQL/MariaDB.
    MySql(Outbox<sqlx::MySql>),
    /// On SQLite.
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
        Kind::Postgres => {
            let pool = sqlx::postgres::PgPoolOptions::new();
            let pool = pool.max_connections(2).acquire_timeout(CONNECT_TIMEOUT);
            let pool = pool.connect(url).await.map_err(sqlx_failure)?;
            OutboxStore::Postgres(Outbox::postgres(pool).with_table_name(table)?)
        }
        Kind::MySql => {
            let pool = sqlx::mysql::MySqlPoolOptions::new();
            let pool = pool.max_connections(2).acquire_timeout(CONNECT_TIMEOUT);
            let pool = pool.connect(url).await.map_err(sqlx_failure)?;
            OutboxStore::MySql(Outbox::mysql(pool).with_table_name(table)?)
        }
        Kind::Sqlite => {
            let pool = sqlx::sqlite::SqlitePoolOptions::new();
            let pool = pool.max_connections(2).acquire_timeout(CONNECT_TIMEOUT);
            let pool = pool.connect(url).await.map_err(sqlx_failure)?;
            OutboxStore::Sqlite(Outbox::sqlite(pool).with_table_name(table)?)
        }
    })
}

/// The record table of `--table` (or IDEMPOTENCY_TABLE), the default otherwise.
pub(crate) fn record_table(global: &Global) -> &str {
    global.table.as_deref().unwrap_or(DEFAULT_RECORD_TABLE)
}

/// The SQL audit table of operator actions on `pool`: `--audit-table` (or
/// IDEMPOTENCY_AUDIT_TABLE), else the one that goes with the record table; created if
/// missing.
pub(crate) async fn sql_audit<D: idempotency_core::sql::Dialect>(
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
) -> Result<(Arc<dyn Operations>, Arc<dyn AuditLog>), Failure>
where
    D: idempotency_core::sql::Dialect,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes() {
        assert_eq!(kind_of("redis://127.0.0.1:6379").ok(), Some(Kind::Redis));
        assert_eq!(
            kind_of("redis://127.0.0.1:7001,redis://127.0.0.1:7002").ok(),
            Some(Kind::RedisCluster)
        );
        assert_eq!(
            kind_of("postgres://postgres@h/test").ok(),
            Some(Kind::Postgres)
        );
        assert_eq!(kind_of("mysql://root@h/test").ok(), Some(Kind::MySql));
        assert_eq!(kind_of("sqlite:///tmp/x.db").ok(), Some(Kind::Sqlite));
        assert!(kind_of("http://h").is_err());
    }

    #[test]
    fn passwords_are_not_shown() {
        assert_eq!(
            redacted("postgres://app:s3cret@db:5432/orders"),
            "postgres://app@db:5432/orders"
        );
        assert_eq!(redacted("redis://:pw@h:6379"), "redis://@h:6379");
        assert_eq!(redacted("sqlite:///tmp/x.db"), "sqlite:///tmp/x.db");
        assert_eq!(redacted("mysql://root@h/test"), "mysql://root@h/test");
    }
}
