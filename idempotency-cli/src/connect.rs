//! `--store URL` to a store with operations, and the audit its actions go to.

use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "redis")]
use idempotency_operations::TracingAudit;
use idempotency_operations::{Admin, AuditLog, Operations};
#[cfg(feature = "redis")]
use idempotency_redis::RedisStore;

use crate::args::Global;
use crate::failure::Failure;
use crate::store::{Audited, Kind, kind_of, not_built_for, redacted, store_url};

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

/// Operations on the store of `--store`, audited as `audited` says; `grace` is how long the
/// services keep an abandoned record after its lease ended (what a purge waits). A SQL
/// store's record table is checked first: one that does not exist, or is not a record table,
/// is a not-found failure naming it.
#[cfg_attr(
    not(feature = "sql"),
    expect(unused_variables, reason = "only SQL stores keep an audit table")
)]
pub(crate) async fn connect(
    global: &Global,
    audited: Audited,
    grace: Duration,
) -> Result<Connected, Failure> {
    let url = store_url(global)?;
    let kind = kind_of(url)?;
    let (store, audit): (Arc<dyn Operations>, Arc<dyn AuditLog>) = match kind {
        #[cfg(feature = "redis")]
        Kind::Redis => {
            let store = RedisStore::connect(url).await?.with_abandoned_grace(grace);
            (
                Arc::new(store.with_key_prefix(global.prefix.clone())),
                Arc::new(TracingAudit),
            )
        }
        #[cfg(feature = "redis")]
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
        #[cfg(feature = "postgres")]
        Kind::Postgres => crate::sql_stores::postgres(url, global, audited, grace).await?,
        #[cfg(feature = "mysql")]
        Kind::MySql => crate::sql_stores::mysql(url, global, audited, grace).await?,
        #[cfg(feature = "sqlite")]
        Kind::Sqlite => crate::sql_stores::sqlite(url, global, audited, grace).await?,
        #[allow(unreachable_patterns)]
        other => return Err(not_built_for(other)),
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
