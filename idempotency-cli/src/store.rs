//! What `--store` names, for every store and for the SQL ones alike: the store's kind by its
//! URL's scheme, the URL as messages show it, the failure of a store this build lacks, and
//! whether actions need an audit log. `connect` (every store) and `sql_stores` (the SQL
//! stores it opens) both build on these.

use crate::args::Global;
use crate::failure::Failure;

/// A store's kind, by its URL's scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `redis://` or `rediss://`, one node.
    Redis,
    /// A comma-separated list of `redis://` nodes.
    RedisCluster,
    /// `postgres://` or `postgresql://`.
    Postgres,
    /// `mysql://` or `mariadb://`.
    MySql,
    /// `sqlite://`.
    Sqlite,
}

/// The kind of store `url` names, or a usage failure naming the schemes known.
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

/// Whether operator actions need an audit log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Audited {
    /// Reads only.
    No,
    /// Actions: audited to the SQL audit table (`--audit-table`, else the one that goes with
    /// the record table; created if missing), to the log stream on Redis.
    Yes,
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
