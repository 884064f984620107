//! Each backend behind its fault: a store over a [`FaultProxy`] in front of the shared server, a
//! `redis-server` of the run's own (paused, or killed and restarted), or a SQLite file whose
//! write lock another connection takes.
// Each backend's rig is built with its feature only.
#![cfg_attr(
    not(all(
        feature = "redis",
        feature = "postgres",
        feature = "mysql",
        feature = "sqlite"
    )),
    allow(dead_code, unused_imports, unused_variables)
)]

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use idempotency_test::{FaultProxy, LinkFault};
use tokio::task::JoinHandle;

use super::{Log, Unavailable, app};
use axum_payments::config::{DEFAULT_DATABASE_URL, DEFAULT_MYSQL_URL, DEFAULT_REDIS_URL};

/// The store timeout of the network stores' runs.
const STORE_TIMEOUT: Duration = Duration::from_secs(1);
/// SQLite's: its writers queue for one lock, so a loaded machine needs longer than 1 s.
const SQLITE_STORE_TIMEOUT: Duration = Duration::from_secs(2);

/// A store backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Redis (`REDIS_URL`, or a `redis-server` of the run's own).
    Redis,
    /// PostgreSQL (`DATABASE_URL`).
    Postgres,
    /// MariaDB or MySQL (`MYSQL_URL`).
    MariaDb,
    /// A SQLite file.
    Sqlite,
}

/// A fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The server process stopped (`SIGSTOP`), then continued: what it received meanwhile it
    /// executes when it resumes.
    Pause,
    /// The server killed (`SIGKILL`) and started again on its data (Redis with `appendfsync
    /// always`).
    Restart,
    /// The link drops nothing but passes nothing: commands held, delivered when it comes back.
    BlackHole,
    /// Every chunk each way delayed past the store timeout: calls time out, commands land late.
    Latency,
    /// Every connection reset every 100 ms, mid-command.
    Resets,
    /// The server refuses connections (open ones reset).
    Refuse,
    /// Another connection holds the database's write lock (SQLite).
    Locked,
    /// The database may not grow (SQLite `max_page_count` set to its size: `SQLITE_FULL`, what a
    /// full disk answers).
    DiskFull,
}

impl Backend {
    /// Every backend.
    pub const ALL: [Self; 4] = [Self::Redis, Self::Postgres, Self::MariaDb, Self::Sqlite];

    /// Its name in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Redis => "redis",
            Self::Postgres => "postgres",
            Self::MariaDb => "mariadb",
            Self::Sqlite => "sqlite",
        }
    }

    /// The faults it is run under.
    pub fn faults(self) -> &'static [Fault] {
        use Fault::*;
        match self {
            Self::Redis => &[Pause, Restart, BlackHole, Latency, Resets, Refuse],
            Self::Postgres | Self::MariaDb => &[BlackHole, Latency, Resets, Refuse],
            Self::Sqlite => &[Locked, DiskFull],
        }
    }
}

impl Fault {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Pause => "pause",
            Self::Restart => "restart",
            Self::BlackHole => "black-hole",
            Self::Latency => "latency",
            Self::Resets => "resets",
            Self::Refuse => "refuse",
            Self::Locked => "locked",
            Self::DiskFull => "disk-full",
        }
    }

    /// What it does, for the table.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Pause => "server paused (SIGSTOP)",
            Self::Restart => "server killed, restarted",
            Self::BlackHole => "link black-holed",
            Self::Latency => "latency 1.5 s each way",
            Self::Resets => "connections reset every 100 ms",
            Self::Refuse => "connections refused",
            Self::Locked => "write lock held elsewhere",
            Self::DiskFull => "database full (max_page_count)",
        }
    }
}

/// A backend ready to run under its fault.
pub(super) struct Rig {
    app: Router,
    injector: Injector,
    run_id: String,
    store_timeout: Duration,
}

/// The store a rig built.
enum AnyStore {
    #[cfg(feature = "redis")]
    Redis(idempotency_redis::RedisStore),
    #[cfg(feature = "postgres")]
    Postgres(idempotency_sql::PostgresStore),
    #[cfg(feature = "mysql")]
    MySql(idempotency_sql::MySqlStore),
    #[cfg(feature = "sqlite")]
    Sqlite(idempotency_sql::SqliteStore),
}

impl AnyStore {
    /// The service under test over this store.
    fn app(self, namespace: &str, store_timeout: Duration, log: Arc<Log>) -> Router {
        match self {
            #[cfg(feature = "redis")]
            Self::Redis(store) => app(store, namespace, store_timeout, log),
            #[cfg(feature = "postgres")]
            Self::Postgres(store) => app(store, namespace, store_timeout, log),
            #[cfg(feature = "mysql")]
            Self::MySql(store) => app(store, namespace, store_timeout, log),
            #[cfg(feature = "sqlite")]
            Self::Sqlite(store) => app(store, namespace, store_timeout, log),
        }
    }
}

/// How a rig brings its fault about.
enum Injector {
    Proxy {
        proxy: Arc<FaultProxy>,
        fault: Fault,
        resets: Option<JoinHandle<()>>,
    },
    OwnRedis {
        server: OwnRedis,
        fault: Fault,
    },
    #[cfg(feature = "sqlite")]
    SqliteLock {
        locker: sqlx::SqliteConnection,
    },
    /// Read by every connection of the store's pool as it is acquired.
    #[cfg(feature = "sqlite")]
    SqliteFull {
        full: Arc<std::sync::atomic::AtomicBool>,
    },
}

impl Rig {
    pub(super) async fn start(
        backend: Backend,
        fault: Fault,
        log: Arc<Log>,
    ) -> Result<Self, Unavailable> {
        if !backend.faults().contains(&fault) {
            return Err(Unavailable::Missing(format!(
                "{} is not run under {}",
                backend.name(),
                fault.name()
            )));
        }
        let run_id = format!("faults_{}", &idempotency_test::unique_key().to_hex()[..12]);
        let (store, injector, store_timeout) = match backend {
            Backend::Redis => redis(fault).await?,
            Backend::Postgres => postgres(fault, &run_id).await?,
            Backend::MariaDb => mysql(fault, &run_id).await?,
            Backend::Sqlite => sqlite(fault, &run_id).await?,
        };
        let app = store.app(&run_id, store_timeout, log);
        Ok(Self {
            app,
            injector,
            run_id,
            store_timeout,
        })
    }

    /// The run's unique name (namespace, table, key prefix).
    pub(super) fn run_id(&self) -> &str {
        &self.run_id
    }

    pub(super) fn store_timeout(&self) -> Duration {
        self.store_timeout
    }

    /// The service under test.
    pub(super) fn app(&self) -> &Router {
        &self.app
    }

    /// Brings the fault about.
    pub(super) async fn inject(&mut self) -> Result<(), Unavailable> {
        match &mut self.injector {
            Injector::Proxy {
                proxy,
                fault,
                resets,
            } => match fault {
                Fault::BlackHole => proxy.set(LinkFault::BlackHole),
                Fault::Latency => {
                    proxy.set(LinkFault::Latency(STORE_TIMEOUT + STORE_TIMEOUT / 2));
                }
                Fault::Refuse => proxy.set(LinkFault::Refuse),
                _ => {
                    let proxy = Arc::clone(proxy);
                    *resets = Some(tokio::spawn(async move {
                        loop {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            proxy.reset();
                        }
                    }));
                }
            },
            Injector::OwnRedis { server, fault } => match fault {
                Fault::Pause => server.signal("STOP"),
                _ => server.kill(),
            },
            #[cfg(feature = "sqlite")]
            Injector::SqliteLock { locker } => {
                sqlx::query("BEGIN EXCLUSIVE")
                    .execute(&mut *locker)
                    .await
                    .map_err(|error| Unavailable::Failed(format!("BEGIN EXCLUSIVE: {error}")))?;
            }
            #[cfg(feature = "sqlite")]
            Injector::SqliteFull { full } => full.store(true, std::sync::atomic::Ordering::SeqCst),
        }
        Ok(())
    }

    /// Lifts the fault.
    pub(super) async fn heal(&mut self) -> Result<(), Unavailable> {
        match &mut self.injector {
            Injector::Proxy { proxy, resets, .. } => {
                if let Some(resets) = resets.take() {
                    resets.abort();
                }
                proxy.set(LinkFault::None);
            }
            Injector::OwnRedis { server, fault } => match fault {
                Fault::Pause => server.signal("CONT"),
                _ => server.restart().await?,
            },
            #[cfg(feature = "sqlite")]
            Injector::SqliteLock { locker } => {
                sqlx::query("ROLLBACK")
                    .execute(&mut *locker)
                    .await
                    .map_err(|error| Unavailable::Failed(format!("ROLLBACK: {error}")))?;
            }
            #[cfg(feature = "sqlite")]
            Injector::SqliteFull { full } => full.store(false, std::sync::atomic::Ordering::SeqCst),
        }
        Ok(())
    }
}

/// `host:port` of a server URL (`scheme://[user[:pass]@]host:port/...`).
fn host_port(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, rest)| rest);
    rest.split(['/', '?']).next().unwrap_or(rest)
}

/// A proxy in front of the server of `url`, and `url` pointed at the proxy.
async fn proxied(service: &str, url: &str) -> Result<(FaultProxy, String), Unavailable> {
    let target = host_port(url);
    let addr: Option<SocketAddr> = tokio::net::lookup_host(target)
        .await
        .ok()
        .and_then(|mut addrs| addrs.next());
    let reachable = match addr {
        Some(addr) => {
            tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr))
                .await
                .is_ok_and(|connected| connected.is_ok())
        }
        None => false,
    };
    if !reachable {
        return Err(Unavailable::Missing(format!(
            "{service} at {target} is not reachable"
        )));
    }
    let proxy = FaultProxy::start(target)
        .await
        .map_err(|error| Unavailable::Missing(format!("fault proxy: {error}")))?;
    let url = url.replacen(target, &proxy.addr().to_string(), 1);
    Ok((proxy, url))
}

fn proxy_injector(proxy: FaultProxy, fault: Fault) -> Injector {
    Injector::Proxy {
        proxy: Arc::new(proxy),
        fault,
        resets: None,
    }
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

#[cfg(feature = "redis")]
async fn redis(fault: Fault) -> Result<(AnyStore, Injector, Duration), Unavailable> {
    use idempotency_redis::RedisStore;
    let connect = |url: String| async move {
        RedisStore::connect(&url)
            .await
            .map_err(|error| Unavailable::Missing(format!("redis at {url}: {error}")))
    };
    if matches!(fault, Fault::Pause | Fault::Restart) {
        let server = OwnRedis::start().await?;
        let store = connect(server.url()).await?;
        return Ok((
            AnyStore::Redis(store),
            Injector::OwnRedis { server, fault },
            STORE_TIMEOUT,
        ));
    }
    let (proxy, url) = proxied("Redis", &env_or("REDIS_URL", DEFAULT_REDIS_URL)).await?;
    let store = connect(url).await?;
    Ok((
        AnyStore::Redis(store),
        proxy_injector(proxy, fault),
        STORE_TIMEOUT,
    ))
}

#[cfg(not(feature = "redis"))]
async fn redis(_: Fault) -> Result<(AnyStore, Injector, Duration), Unavailable> {
    Err(Unavailable::Missing(
        "built without the `redis` feature".to_owned(),
    ))
}

#[cfg(feature = "postgres")]
async fn postgres(
    fault: Fault,
    table: &str,
) -> Result<(AnyStore, Injector, Duration), Unavailable> {
    let (proxy, url) = proxied("PostgreSQL", &env_or("DATABASE_URL", DEFAULT_DATABASE_URL)).await?;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .acquire_timeout(STORE_TIMEOUT)
        .connect(&url)
        .await
        .map_err(|error| Unavailable::Missing(format!("PostgreSQL: {error}")))?;
    let store = idempotency_sql::PostgresStore::new(pool)
        .with_table_name(table)
        .map_err(|error| Unavailable::Missing(error.to_string()))?;
    store
        .migrate()
        .await
        .map_err(|error| Unavailable::Missing(error.to_string()))?;
    Ok((
        AnyStore::Postgres(store),
        proxy_injector(proxy, fault),
        STORE_TIMEOUT,
    ))
}

#[cfg(not(feature = "postgres"))]
async fn postgres(_: Fault, _: &str) -> Result<(AnyStore, Injector, Duration), Unavailable> {
    Err(Unavailable::Missing(
        "built without the `postgres` feature".to_owned(),
    ))
}

#[cfg(feature = "mysql")]
async fn mysql(fault: Fault, table: &str) -> Result<(AnyStore, Injector, Duration), Unavailable> {
    let (proxy, url) = proxied("MariaDB", &env_or("MYSQL_URL", DEFAULT_MYSQL_URL)).await?;
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(8)
        .acquire_timeout(STORE_TIMEOUT)
        .connect(&url)
        .await
        .map_err(|error| Unavailable::Missing(format!("MariaDB: {error}")))?;
    let store = idempotency_sql::MySqlStore::new(pool)
        .with_table_name(table)
        .map_err(|error| Unavailable::Missing(error.to_string()))?;
    store
        .migrate()
        .await
        .map_err(|error| Unavailable::Missing(error.to_string()))?;
    Ok((
        AnyStore::MySql(store),
        proxy_injector(proxy, fault),
        STORE_TIMEOUT,
    ))
}

#[cfg(not(feature = "mysql"))]
async fn mysql(_: Fault, _: &str) -> Result<(AnyStore, Injector, Duration), Unavailable> {
    Err(Unavailable::Missing(
        "built without the `mysql` feature".to_owned(),
    ))
}

#[cfg(feature = "sqlite")]
async fn sqlite(fault: Fault, run_id: &str) -> Result<(AnyStore, Injector, Duration), Unavailable> {
    use std::sync::atomic::{AtomicBool, Ordering};

    use sqlx::Connection;
    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
    let dir = std::env::temp_dir().join("idempotency-example-tests");
    let missing = |error: &dyn std::fmt::Display| Unavailable::Missing(format!("SQLite: {error}"));
    std::fs::create_dir_all(&dir).map_err(|error| missing(&error))?;
    let options = SqliteConnectOptions::new()
        .filename(dir.join(format!("{run_id}.db")))
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(10));
    let full = Arc::new(AtomicBool::new(false));
    let limit = Arc::clone(&full);
    let pool = SqlitePoolOptions::new()
        .max_connections(4)
        // Full: no page beyond the file's size (SQLite raises a lower limit to the size);
        // otherwise SQLite's default limit.
        .before_acquire(move |connection, _| {
            let pages = if limit.load(Ordering::SeqCst) {
                1
            } else {
                1_073_741_823
            };
            Box::pin(async move {
                sqlx::query(&format!("PRAGMA max_page_count = {pages}"))
                    .execute(&mut *connection)
                    .await?;
                Ok(true)
            })
        })
        .connect_with(options.clone())
        .await
        .map_err(|error| missing(&error))?;
    let store = idempotency_sql::SqliteStore::new(pool);
    store.migrate().await.map_err(|error| missing(&error))?;
    let injector = if fault == Fault::DiskFull {
        Injector::SqliteFull { full }
    } else {
        let locker = sqlx::SqliteConnection::connect_with(&options)
            .await
            .map_err(|error| missing(&error))?;
        Injector::SqliteLock { locker }
    };
    Ok((AnyStore::Sqlite(store), injector, SQLITE_STORE_TIMEOUT))
}

#[cfg(not(feature = "sqlite"))]
async fn sqlite(_: Fault, _: &str) -> Result<(AnyStore, Injector, Duration), Unavailable> {
    Err(Unavailable::Missing(
        "built without the `sqlite` feature".to_owned(),
    ))
}

/// A `redis-server` of the run's own on a free loopback port, its data in a fresh directory
/// (append-only, fsynced at every write, so that a restart keeps every record); killed when
/// dropped.
struct OwnRedis {
    child: Option<Child>,
    port: u16,
    dir: std::path::PathBuf,
}

impl OwnRedis {
    async fn start() -> Result<Self, Unavailable> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map(|addr| addr.port())
            .map_err(|error| Unavailable::Missing(format!("a free port: {error}")))?;
        let dir = std::env::temp_dir()
            .join("idempotency-example-tests")
            .join(format!("redis-{port}"));
        std::fs::create_dir_all(&dir)
            .map_err(|error| Unavailable::Missing(format!("{}: {error}", dir.display())))?;
        let mut server = Self {
            child: None,
            port,
            dir,
        };
        server.spawn()?;
        server.up().await?;
        Ok(server)
    }

    fn spawn(&mut self) -> Result<(), Unavailable> {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|error| Unavailable::Missing(format!("redis-server: {error}")))?;
        self.child = Some(child);
        Ok(())
    }

    async fn up(&self) -> Result<(), Unavailable> {
        for _ in 0..400 {
            if tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_ok()
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        Err(Unavailable::Failed(format!(
            "redis-server on {} did not start",
            self.port
        )))
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            let status = Command::new("kill")
                .arg(format!("-{signal}"))
                .arg(child.id().to_string())
                .status();
            assert!(
                status.is_ok_and(|status| status.success()),
                "kill -{signal}"
            );
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    async fn restart(&mut self) -> Result<(), Unavailable> {
        self.spawn()?;
        self.up().await
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
