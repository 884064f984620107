//! Choosing the store and the repository at run time: `IDEMPOTENCY_STORE`.

use std::sync::Arc;
use std::time::Duration;

use idempotency_core::{BoxStore, MemoryStore};

use super::callers::{API_TOKENS, Callers};
use super::memory::MemoryRepo;
use super::repo::PaymentsRepo;
use super::signature;
use super::state::AppState;

/// Which backend keeps the idempotency records (and, for SQL, the orders and coupons too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// In-process memory (default).
    Memory,
    /// Redis (`REDIS_URL`); orders and coupons stay in memory.
    Redis,
    /// SQLite (`SQLITE_URL`).
    Sqlite,
    /// PostgreSQL (`DATABASE_URL`).
    Postgres,
    /// MySQL / MariaDB (`MYSQL_URL`).
    Mysql,
}

impl StoreKind {
    /// The name `IDEMPOTENCY_STORE` uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Redis => "redis",
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
            Self::Mysql => "mysql",
        }
    }
}

impl std::str::FromStr for StoreKind {
    type Err = ConfigError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim().to_ascii_lowercase().as_str() {
            "" | "memory" => Ok(Self::Memory),
            "redis" => Ok(Self::Redis),
            "sqlite" => Ok(Self::Sqlite),
            "postgres" | "postgresql" => Ok(Self::Postgres),
            "mysql" | "mariadb" => Ok(Self::Mysql),
            _ => Err(ConfigError::UnknownStore(text.to_owned())),
        }
    }
}

/// Why no backend could be built.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `IDEMPOTENCY_STORE` names no known store.
    #[error("IDEMPOTENCY_STORE={0:?} is not one of memory, redis, sqlite, postgres, mysql")]
    UnknownStore(String),
    /// The binary was built without the store's cargo feature.
    #[error(
        "IDEMPOTENCY_STORE={store} needs the `{store}` feature: cargo run -p axum-payments --features {store} --bin payments"
    )]
    FeatureDisabled {
        /// The store asked for.
        store: &'static str,
    },
    /// The store's implementation is not part of this build of the toolkit yet.
    #[error("IDEMPOTENCY_STORE={store} is not available: {missing}")]
    NotAvailable {
        /// The store asked for.
        store: &'static str,
        /// What is missing.
        missing: &'static str,
    },
    /// A setting is not what it must be.
    #[error("{name}={value:?}: {expected}")]
    Invalid {
        /// The environment variable.
        name: &'static str,
        /// Its value.
        value: String,
        /// What it must be.
        expected: &'static str,
    },
    /// Connecting to (or preparing) the backend failed.
    #[error("IDEMPOTENCY_STORE={store}: {error}")]
    Backend {
        /// The store asked for.
        store: &'static str,
        /// What failed.
        error: String,
    },
}

/// A store for idempotency records and the repository for orders and coupons.
#[derive(Clone)]
pub struct Backend {
    /// Which backend this is.
    pub kind: StoreKind,
    /// The idempotency records.
    pub store: BoxStore,
    /// Orders and coupons.
    pub repo: Arc<dyn PaymentsRepo>,
    /// On a SQL backend, the same store and repository, typed for transactional HTTP.
    pub sql: Option<SqlBackend>,
}

/// A SQL backend's store and repository, in one database: what transactional HTTP needs.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum SqlBackend {
    /// PostgreSQL.
    #[cfg(feature = "postgres")]
    Postgres(
        idempotency_sql::PostgresStore,
        Arc<crate::sql::PostgresRepo>,
    ),
    /// MySQL / MariaDB.
    #[cfg(feature = "mysql")]
    Mysql(idempotency_sql::MySqlStore, Arc<crate::sql::MySqlRepo>),
    /// SQLite.
    #[cfg(feature = "sqlite")]
    Sqlite(idempotency_sql::SqliteStore, Arc<crate::sql::SqliteRepo>),
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl Backend {
    /// The in-process backend: a [`MemoryStore`] and a [`MemoryRepo`].
    pub fn memory() -> Self {
        Self {
            kind: StoreKind::Memory,
            store: BoxStore::new(MemoryStore::new()),
            repo: Arc::new(MemoryRepo::new()),
            sql: None,
        }
    }
}

/// The handlers' state over `repo`, from the environment: `HANDLER_DELAY_MS` (milliseconds the
/// two POST handlers pause after their writes, before they commit or answer: a crash drill's
/// window; default 0), `CALLBACK_SECRET` (the gateway's signature secret; callbacks are not
/// checked without it, and the service says so at start) and `API_TOKENS` (`token=caller,…`:
/// who may order; without it every bearer token is a caller of its own).
pub fn state_from_env(repo: Arc<dyn PaymentsRepo>) -> Result<AppState, ConfigError> {
    let mut state = AppState::new(repo);
    if let Ok(value) = std::env::var("HANDLER_DELAY_MS") {
        let millis = value
            .trim()
            .parse::<u64>()
            .map_err(|_| ConfigError::Invalid {
                name: "HANDLER_DELAY_MS",
                value: value.clone(),
                expected: "a whole number of milliseconds",
            })?;
        state = state.with_handler_delay(Duration::from_millis(millis));
    }
    if let Ok(spec) = std::env::var(API_TOKENS) {
        let callers = Callers::parse(&spec).map_err(|_| ConfigError::Invalid {
            name: API_TOKENS,
            value: "(hidden)".to_owned(),
            expected: "token=caller pairs, separated by commas",
        })?;
        state = state.with_callers(callers);
    }
    match std::env::var(signature::CALLBACK_SECRET) {
        Ok(secret) if !secret.is_empty() => {
            state = state.with_callback_secret(secret.into_bytes());
        }
        _ => tracing::warn!(
            "CALLBACK_SECRET is not set: payment callbacks are accepted without checking the \
             gateway's signature"
        ),
    }
    Ok(state)
}

/// Reads `IDEMPOTENCY_STORE` (default `memory`) and the backend's URL from the environment
/// (`REDIS_URL` or `REDIS_CLUSTER_URLS`, `SQLITE_URL`, `DATABASE_URL`, `MYSQL_URL`, with local
/// defaults).
pub async fn backend_from_env() -> Result<Backend, ConfigError> {
    let kind = std::env::var("IDEMPOTENCY_STORE")
        .unwrap_or_default()
        .parse::<StoreKind>()?;
    backend(kind, |name| std::env::var(name).ok()).await
}

/// Builds the backend `kind`, reading URLs through `env`.
pub async fn backend(
    kind: StoreKind,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Backend, ConfigError> {
    match kind {
        StoreKind::Memory => Ok(Backend::memory()),
        StoreKind::Redis => redis_backend(&env).await,
        StoreKind::Sqlite => sqlite_backend(&env).await,
        StoreKind::Postgres => postgres_backend(&env).await,
        StoreKind::Mysql => mysql_backend(&env).await,
    }
}

/// `REDIS_URL`'s default.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// Redis keeps the idempotency records (expiring natively); orders and coupons live in
/// PostgreSQL when `DATABASE_URL` is set (feature `postgres`), else in this process
/// ([`MemoryRepo`], lost on a restart while the records stay). The first is the setup whose
/// records can dangle: a process killed between its business commit and its completion (or
/// before either) leaves an in-progress record in Redis, which `idempotency stuck` finds. With
/// `REDIS_CLUSTER_URLS` set (some of a Redis Cluster's nodes, comma separated), the records
/// live in that cluster instead of at `REDIS_URL`: the path a service takes when it outgrows
/// one Redis, with no other change.
#[cfg(feature = "redis")]
async fn redis_backend(env: &impl Fn(&str) -> Option<String>) -> Result<Backend, ConfigError> {
    use idempotency_redis::RedisStore;
    let (target, store) = match env("REDIS_CLUSTER_URLS") {
        Some(nodes) => {
            let list = nodes
                .split(',')
                .map(str::trim)
                .filter(|node| !node.is_empty());
            let store = RedisStore::connect_cluster(list).await.map(BoxStore::new);
            (nodes, store)
        }
        None => {
            let url = env("REDIS_URL").unwrap_or_else(|| DEFAULT_REDIS_URL.to_owned());
            let store = RedisStore::connect(&url).await.map(BoxStore::new);
            (url, store)
        }
    };
    let store = store.map_err(|error| ConfigError::Backend {
        store: "redis",
        error: format!("{target}: {error}"),
    })?;
    Ok(Backend {
        kind: StoreKind::Redis,
        store,
        repo: repo_beside_redis(env).await?,
        sql: None,
    })
}

/// Orders and coupons beside Redis records: in PostgreSQL at `DATABASE_URL` if it is set.
#[cfg(all(feature = "redis", feature = "postgres"))]
async fn repo_beside_redis(
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Arc<dyn PaymentsRepo>, ConfigError> {
    let Some(url) = env("DATABASE_URL") else {
        return Ok(Arc::new(MemoryRepo::new()));
    };
    let pool = sqlx::postgres::PgPoolOptions::new()
        .connect(&url)
        .await
        .map_err(|e| failed("postgres", &url, e))?;
    let repo = crate::sql::PostgresRepo::new(pool, DEFAULT_TABLE_PREFIX)
        .await
        .map_err(|e| failed("postgres", &url, e))?;
    Ok(Arc::new(repo))
}

/// Orders and coupons beside Redis records: in this process (no `postgres` feature).
#[cfg(all(feature = "redis", not(feature = "postgres")))]
async fn repo_beside_redis(
    _env: &impl Fn(&str) -> Option<String>,
) -> Result<Arc<dyn PaymentsRepo>, ConfigError> {
    Ok(Arc::new(MemoryRepo::new()))
}

#[cfg(not(feature = "redis"))]
async fn redis_backend(_env: &impl Fn(&str) -> Option<String>) -> Result<Backend, ConfigError> {
    Err(ConfigError::FeatureDisabled { store: "redis" })
}

/// `SQLITE_URL`'s default: a file in the working directory, created if missing.
pub const DEFAULT_SQLITE_URL: &str = "sqlite://payments.db?mode=rwc";

/// `DATABASE_URL`'s default.
pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// `MYSQL_URL`'s default.
pub const DEFAULT_MYSQL_URL: &str = "mysql://root@127.0.0.1:3306/test";

#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
fn failed(store: &'static str, url: &str, error: impl std::fmt::Display) -> ConfigError {
    ConfigError::Backend {
        store,
        error: format!("{}: {error}", redact(url)),
    }
}

/// The URL without its password, for error messages.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let user_info = &url[scheme + 3..at];
            match user_info.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// The table prefix of the SQL repositories.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
use crate::sql::DEFAULT_TABLE_PREFIX;

/// The SQL backends: the idempotency records in the database (table created if missing), and
/// orders and coupons in the same database, so that each guarded request's writes and record
/// commit in one transaction (transactional HTTP).
#[cfg(feature = "sqlite")]
async fn sqlite_backend(env: &impl Fn(&str) -> Option<String>) -> Result<Backend, ConfigError> {
    let url = env("SQLITE_URL").unwrap_or_else(|| DEFAULT_SQLITE_URL.to_owned());
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .connect(&url)
        .await
        .map_err(|e| failed("sqlite", &url, e))?;
    let store = idempotency_sql::SqliteStore::new(pool.clone());
    store
        .migrate()
        .await
        .map_err(|e| failed("sqlite", &url, e))?;
    let repo = crate::sql::SqliteRepo::new(pool, DEFAULT_TABLE_PREFIX)
        .await
        .map_err(|e| failed("sqlite", &url, e))?;
    let repo = Arc::new(repo);
    Ok(Backend {
        kind: StoreKind::Sqlite,
        store: BoxStore::new(store.clone()),
        repo: repo.clone(),
        sql: Some(SqlBackend::Sqlite(store, repo)),
    })
}

#[cfg(not(feature = "sqlite"))]
async fn sqlite_backend(_env: &impl Fn(&str) -> Option<String>) -> Result<Backend, ConfigError> {
    Err(ConfigError::FeatureDisabled { store: "sqlite" })
}

#[cfg(feature = "postgres")]
async fn postgres_backend(env: &impl Fn(&str) -> Option<String>) -> Result<Backend, ConfigError> {
    let url = env("DATABASE_URL").unwrap_or_else(|| DEFAULT_DATABASE_URL.to_owned());
    let pool = sqlx::postgres::PgPoolOptions::new()
        .connect(&url)
        .await
        .map_err(|e| failed("postgres", &url, e))?;
    let store = idempotency_sql::PostgresStore::new(pool.clone());
    store
        .migrate()
        .await
        .map_err(|e| failed("postgres", &url, e))?;
    let repo = crate::sql::PostgresRepo::new(pool, DEFAULT_TABLE_PREFIX)
        .await
        .map_err(|e| failed("postgres", &url, e))?;
    let repo = Arc::new(repo);
    Ok(Backend {
        kind: StoreKind::Postgres,
        store: BoxStore::new(store.clone()),
        repo: repo.clone(),
        sql: Some(SqlBackend::Postgres(store, repo)),
    })
}

#[cfg(not(feature = "postgres"))]
async fn postgres_backend(_env: &impl Fn(&str) -> Option<String>) -> Result<Backend, ConfigError> {
    Err(ConfigError::FeatureDisabled { store: "postgres" })
}

#[cfg(feature = "mysql")]
async fn mysql_backend(env: &impl Fn(&str) -> Option<String>) -> Result<Backend, ConfigError> {
    let url = env("MYSQL_URL").unwrap_or_else(|| DEFAULT_MYSQL_URL.to_owned());
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .connect(&url)
        .await
        .map_err(|e| failed("mysql", &url, e))?;
    let store = idempotency_sql::MySqlStore::new(pool.clone());
    store
        .migrate()
        .await
        .map_err(|e| failed("mysql", &url, e))?;
    let repo = crate::sql::MySqlRepo::new(pool, DEFAULT_TABLE_PREFIX)
        .await
        .map_err(|e| failed("mysql", &url, e))?;
    let repo = Arc::new(repo);
    Ok(Backend {
        kind: StoreKind::Mysql,
        store: BoxStore::new(store.clone()),
        repo: repo.clone(),
        sql: Some(SqlBackend::Mysql(store, repo)),
    })
}

#[cfg(not(feature = "mysql"))]
async fn mysql_backend(_env: &impl Fn(&str) -> Option<String>) -> Result<Backend, ConfigError> {
    Err(ConfigError::FeatureDisabled { store: "mysql" })
}

#[cfg(all(test, any(feature = "sqlite", feature = "postgres", feature = "mysql")))]
mod tests {
    use super::redact;

    #[test]
    fn passwords_never_reach_error_messages() {
        assert_eq!(
            redact("postgres://app:s3cret@db:5432/x"),
            "postgres://app:***@db:5432/x"
        );
        assert_eq!(
            redact("mysql://root@127.0.0.1/test"),
            "mysql://root@127.0.0.1/test"
        );
        assert_eq!(redact("sqlite://payments.db"), "sqlite://payments.db");
    }
}
