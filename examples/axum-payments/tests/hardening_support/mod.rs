//! Shared by the crash, fault and storm tests: the store servers' URLs, a reachability probe,
//! unique names, and the `crash_target` process.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    unreachable_pub,
    dead_code
)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use axum_payments::client::{self, Reply};
use http::{Method, StatusCode};

pub fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

pub fn postgres_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

pub fn mysql_url() -> String {
    std::env::var("MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned())
}

/// `host:port` of a server URL (`scheme://[user[:pass]@]host:port/...`).
pub fn host_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, rest)| rest);
    rest.split(['/', '?']).next().unwrap_or(rest).to_owned()
}

/// Whether the server of `url` accepts TCP connections; if not, reports it through
/// `idempotency_test::unavailable` (a failure under `CI=true`, a skip otherwise).
pub fn reachable(service: &str, url: &str) -> bool {
    let target = host_port(url);
    let addr: Option<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(&target)
        .ok()
        .and_then(|mut addrs| addrs.next());
    let result = match addr {
        Some(addr) => std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))
            .map(|_| ())
            .map_err(|e| e.to_string()),
        None => Err(format!("cannot resolve {target}")),
    };
    match result {
        Ok(()) => true,
        Err(error) => idempotency_test::unavailable::<()>(service, error).is_some(),
    }
}

/// A name no other test or run uses (letters, digits and `_`).
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}_{}",
        &idempotency_test::unique_key().to_hex()[..12]
    )
}

/// A fresh path in the temporary directory.
pub fn temp_path(prefix: &str, ext: &str) -> PathBuf {
    // One directory for every file these tests leave behind, easy to remove:
    // idempotency-example-tests (`.ci/run` empties it before each run).
    let dir = std::env::temp_dir().join("idempotency-example-tests");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!("{}.{ext}", unique(prefix)))
}

/// `POST path` with an `Idempotency-Key` on a new connection.
pub async fn post(addr: SocketAddr, path: &str, key: &str) -> Reply {
    let request = client::request(Method::POST, path, Some(key), None).unwrap();
    client::send_once(addr, request).await.unwrap()
}

/// The pid in a `{"pid":N}` answer of the crash target.
pub fn pid_of(reply: &Reply) -> u32 {
    let value: serde_json::Value = serde_json::from_slice(&reply.body)
        .unwrap_or_else(|e| panic!("{e}: {:?} {:?}", reply.status, reply.body));
    value["pid"].as_u64().unwrap() as u32
}

/// What the crash target's execution log says about a key: (pid, "start"|"done") lines.
pub fn log_lines(log: &Path, key: &str) -> Vec<(u32, String)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let mut parts = line.split(' ');
            let (what, pid, k) = (parts.next()?, parts.next()?, parts.next()?);
            (k == key).then(|| (pid.parse().unwrap(), what.to_owned()))
        })
        .collect()
}

pub fn count(lines: &[(u32, String)], what: &str) -> usize {
    lines.iter().filter(|(_, w)| w == what).count()
}

/// Where a crash target keeps its records.
#[derive(Clone, Debug)]
pub struct StoreSpec {
    /// `memory`, `redis`, `sqlite`, `postgres` or `mysql`.
    pub kind: &'static str,
    /// The store's URL (empty for memory).
    pub url: String,
    /// The SQL table or Redis key prefix, unique per test.
    pub table: String,
}

/// A running `crash_target` process; killed (SIGKILL) when dropped.
pub struct CrashTarget {
    child: Child,
    pub addr: SocketAddr,
    pub stderr: PathBuf,
}

impl CrashTarget {
    /// Starts a target on `store` whose handler takes `handler`, writing to `log`.
    pub fn start(store: &StoreSpec, log: &Path, handler: Duration, lease: Duration) -> Self {
        let stderr = temp_path("crash_target_stderr", "log");
        let mut child = Command::new(env!("CARGO_BIN_EXE_crash_target"))
            .env("CRASH_STORE", store.kind)
            .env("CRASH_URL", &store.url)
            .env("CRASH_TABLE", &store.table)
            .env("CRASH_LOG", log)
            .env("CRASH_HANDLER_MS", handler.as_millis().to_string())
            .env("CRASH_LEASE_MS", lease.as_millis().to_string())
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("start crash_target");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let Some(addr) = line.trim().strip_prefix("listening ") else {
            let _ = child.wait();
            panic!(
                "crash_target did not start: {}",
                std::fs::read_to_string(&stderr).unwrap_or_default()
            );
        };
        Self {
            addr: addr.parse().unwrap(),
            child,
            stderr,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, then reap.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Sends a signal (`STOP`, `CONT`) to this process, by its id.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} {}", self.pid());
    }

    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for CrashTarget {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits (bounded) until the log shows `what` by `pid` for `key`.
pub async fn wait_for_line(log: &Path, key: &str, pid: u32, what: &str) {
    for _ in 0..400 {
        if log_lines(log, key)
            .iter()
            .any(|(p, w)| *p == pid && w == what)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no `{what} {pid} {key}` in the log");
}

/// Retries `POST /work` (bounded) until an answer other than 409 arrives; returns it and how
/// many 409s came first. Every answer must be 200 or 409.
pub async fn retry_until_done(addr: SocketAddr, key: &str) -> (Reply, usize) {
    let mut conflicts = 0;
    for _ in 0..200 {
        let reply = post(addr, "/work", key).await;
        match reply.status {
            StatusCode::CONFLICT => {
                assert!(reply.headers.contains_key("retry-after"));
                conflicts += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            StatusCode::OK => return (reply, conflicts),
            other => panic!("unexpected {other}: {:?}", reply.body),
        }
    }
    panic!("the key never completed");
}

/// A PostgreSQL store on a table of its own (migrated), and what drops the table; `None` where
/// the server is unreachable (a skip with a printed reason, or a failure under `CI=true`).
#[cfg(feature = "postgres")]
pub async fn postgres_store(
    options: sqlx::postgres::PgPoolOptions,
    prefix: &str,
) -> Option<(idempotency_sql::PostgresStore, impl AsyncFnOnce())> {
    if !reachable("PostgreSQL", &postgres_url()) {
        return None;
    }
    let pool = options.connect(&postgres_url()).await.unwrap();
    let table = unique(prefix);
    let store = idempotency_sql::PostgresStore::new(pool.clone())
        .with_table_name(&table)
        .unwrap();
    store.migrate().await.unwrap();
    let drop_table = async move || {
        let statement = format!("DROP TABLE {table}");
        sqlx::query(&statement).execute(&pool).await.unwrap();
    };
    Some((store, drop_table))
}

/// A MySQL (MariaDB) store on a table of its own (migrated), and what drops the table; `None`
/// where the server is unreachable (a skip with a printed reason, or a failure under `CI=true`).
#[cfg(feature = "mysql")]
pub async fn mysql_store(
    options: sqlx::mysql::MySqlPoolOptions,
    prefix: &str,
) -> Option<(idempotency_sql::MySqlStore, impl AsyncFnOnce())> {
    if !reachable("MySQL", &mysql_url()) {
        return None;
    }
    let pool = options.connect(&mysql_url()).await.unwrap();
    let table = unique(prefix);
    let store = idempotency_sql::MySqlStore::new(pool.clone())
        .with_table_name(&table)
        .unwrap();
    store.migrate().await.unwrap();
    let drop_table = async move || {
        let statement = format!("DROP TABLE {table}");
        sqlx::query(&statement).execute(&pool).await.unwrap();
    };
    Some((store, drop_table))
}

/// A SQLite store in a database file of its own (WAL, a 60-s busy timeout, migrated), and what
/// closes it and removes the file.
#[cfg(feature = "sqlite")]
pub async fn sqlite_store(
    options: sqlx::sqlite::SqlitePoolOptions,
    prefix: &str,
) -> (idempotency_sql::SqliteStore, impl AsyncFnOnce()) {
    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};
    let path = temp_path(prefix, "db");
    let connect = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(60));
    let pool = options.connect_with(connect).await.unwrap();
    let store = idempotency_sql::SqliteStore::new(pool.clone());
    store.migrate().await.unwrap();
    let remove = async move || {
        pool.close().await;
        let _ = std::fs::remove_file(&path);
    };
    (store, remove)
}

/// A running `payments` process; killed (SIGKILL) when dropped.
pub struct Payments {
    child: Child,
    pub addr: SocketAddr,
    pub stderr: PathBuf,
}

impl Payments {
    /// Starts `payments` on `store` (`postgres`, `mysql`, `sqlite`) with these extra settings.
    pub fn start(store: &str, env: &[(&str, String)]) -> Self {
        let stderr = temp_path("payments_stderr", "log");
        let mut command = Command::new(env!("CARGO_BIN_EXE_payments"));
        command
            .env("IDEMPOTENCY_STORE", store)
            .env("ADDR", "127.0.0.1:0")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("start payments");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let Some(addr) = line.trim().strip_prefix("listening ") else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "payments did not start: {}",
                std::fs::read_to_string(&stderr).unwrap_or_default()
            );
        };
        Self {
            addr: addr.parse().unwrap(),
            child,
            stderr,
        }
    }

    /// What it logged so far.
    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits until `count` handlers have started their drill pause (`HANDLER_DELAY_MS`): the
    /// event a drill kills or stops the process on, whatever the machine's load.
    pub async fn paused_handlers(&self, count: usize) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while self
            .stderr_text()
            .matches(axum_payments::DRILL_PAUSED)
            .count()
            < count
        {
            assert!(
                std::time::Instant::now() < deadline,
                "no paused handler within 60 s: {}",
                self.stderr_text()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILL, then reap.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// SIGTERM, then its exit status, waited for up to `within` (`None` if it is still running
    /// then; it is killed on drop).
    pub async fn terminate(mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -TERM");
        let deadline = std::time::Instant::now() + within;
        while std::time::Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }
}

impl Drop for Payments {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Payments {
    /// Waits (up to `within`) for the process to exit by itself, as a `CRASH_AFTER` drill's
    /// service does; its exit status, or `None` if it is still running then (it is killed on
    /// drop).
    pub async fn exited(mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + within;
        while std::time::Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }
}

/// A running `provider` process (the checkout's payment provider); killed (SIGKILL) when
/// dropped.
pub struct Provider {
    child: Child,
    pub addr: SocketAddr,
    pub stderr: PathBuf,
}

impl Provider {
    /// Starts `provider` on a free port (`PROVIDER_ADDR=127.0.0.1:0` unless `env` names one)
    /// with these extra settings (e.g. `PROVIDER_DECLINE_ORDER`).
    pub fn start(env: &[(&str, String)]) -> Self {
        let stderr = temp_path("provider_stderr", "log");
        let mut command = Command::new(env!("CARGO_BIN_EXE_provider"));
        command
            .env("PROVIDER_ADDR", "127.0.0.1:0")
            .env_remove("PROVIDER_DECLINE_ORDER")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("start provider");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let Some(addr) = line.trim().strip_prefix("listening ") else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "provider did not start: {}",
                std::fs::read_to_string(&stderr).unwrap_or_default()
            );
        };
        Self {
            addr: addr.parse().unwrap(),
            child,
            stderr,
        }
    }

    /// `GET /captures?order_id=N`: the order's distinct captures.
    pub async fn captures(&self, order_id: u64) -> axum_payments::provider::Captures {
        axum_payments::provider::captures_at(self.addr, i64::try_from(order_id).unwrap())
            .await
            .unwrap()
    }

    /// What it logged so far.
    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
