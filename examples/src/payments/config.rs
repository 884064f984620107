//! Choosing the store and the repository at run time: `IDEMPOTENCY_STORE`.

use std::sync::Arc;

use idempotency_core::{BoxStore, MemoryStore};

use super::memory::MemoryRepo;
use super::repo::PaymentsRepo;

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
        "IDEMPOTENCY_STORE={store} needs the `{store}` feature: cargo run -p idempotency-examples --features {store} --bin payments"
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
        }
    }
}

/// Reads `IDEMPOTENCY_STORE` (default `memory`) and the backend's URL from the environment
/// (`REDIS_URL`, `SQLITE_URL`, `DATABASE_URL`, `MYSQL_URL`, with local defaults).
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
    let _ = &env;
    match kind {
        StoreKind::Memory => Ok(Backend::memory()),
        StoreKind::Redis => redis_backend(&env).await,
        StoreKind::Sqlite => sqlite_backend(&env).await,
        StoreKind::Postgres => postgres_backend(&env).await,
        StoreKind::Mysql => mysql_backend(&env).await,
    }
}

#[cfg(feature = "redis")]
async fn redis_backend(_env: &impl Fn(&str) -> Option<String>) -> Result<Backend, ConfigError> {
    Err(ConfigError::NotAvailable {
        store: "redis",
        missing: "idempotency_core::redis::RedisStore has not landed in this tree",
    })
}

#[cfg(not(feature = "redis"))]
async fn redis_backend(_env: &impl Fn(&str) -> Option<String>) -> Result<Backend, ConfigError> {
    Err(ConfigError::FeatureDisabled { store: "redis" })
}

#[cfg(feature = "sqlite")]
async fn sqlite_backend(_env: &impl Fn(&str) -> Option<String>) -> Result<Backend, ConfigError> {
    Err(ConfigError::NotAvailable {
        store: "sqlite",
        missing: "the SQLite store and payments repository (idempotency_core::sql) have not landed in this tree",
    })
}

#[cfg(not(feature = "sqlite"))]
async fn sqlite_backend(_env: &impl Fn(&str) -> Option<String>) -> Result<Backend, ConfigError> {
    Err(ConfigError::FeatureDisabled { store: "sqlite" })
}

#[cfg(feature = "postgres")]
async fn postgres_backend(_env: &impl Fn(&str) -> Option<String>) -> Result<Backend, ConfigError> {
    Err(ConfigError::NotAvailable {
        store: "postgres",
        missing: "the PostgreSQL store and payments repository (idempotency_core::sql) have not landed in this tree",
    })
}

#[cfg(not(feature = "postgres"))]
async fn postgres_backend(_env: &impl Fn(&str) -> Option<String>) -> Result<Backend, ConfigError> {
    Err(ConfigError::FeatureDisabled { store: "postgres" })
}

#[cfg(feature = "mysql")]
async fn mysql_backend(_env: &impl Fn(&str) -> Option<String>) -> Result<Backend, ConfigError> {
    Err(ConfigError::NotAvailable {
        store: "mysql",
        missing: "the MySQL store and payments repository (idempotency_core::sql) have not landed in this tree",
    })
}

#[cfg(not(feature = "mysql"))]
async fn mysql_backend(_env: &impl Fn(&str) -> Option<String>) -> Result<Backend, ConfigError> {
    Err(ConfigError::FeatureDisabled { store: "mysql" })
}
