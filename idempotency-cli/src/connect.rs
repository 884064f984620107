//! `--store URL` to a store with operations, and the audit its actions go to.

use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "redis")]
use idempotency_core::operations::TracingAudit;
use idempotency_core::operations::{Admin, AuditLog, Operations};
#[cfg(feature = "redis")]
use idempotency_redis::RedisStore;

use crate::args::Global;
use crate::failure::Failure;

/// A store's kind, by its URL's scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Redis,
    RedisCluster,
    Postgres,
    MySql,
    Sqlite,
}

pub(crate) fn kind_of(url: &str) -> Result<Kind, Failure> {
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

/// The usage failure of a store this build has no support for.
pub(crate) fn not_built_for(kind: Kind) -> Failure {
    let feature = match kind {
        Kind::Redis | Kind::RedisCluster => "redis",
        Kind::Postgres => "postgres",
        Kind::MySql => "mysql",
        Kind::Sqlite => "sqlite",
    };
    Failure::Usage(format!(
        "this idempotency was built without the {feature} store: install it with \
         --features {feature}"
    ))
}

/// `--store`, or a usage failure.
pub(crate) fn store_url(global: &Global) -> Result<&str, Failure> {
    global.store.as_deref().ok_or_else(|| {
        Failure::Usage("no store: pass --store URL or set IDEMPOTENCY_STORE_URL".to_owned())
    })
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
