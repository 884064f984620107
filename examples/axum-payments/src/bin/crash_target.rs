//! A tiny guarded service for the crash tests (`tests/crash_*.rs`): the tests start it
//! as a real process, kill it (SIGKILL) or pause it (SIGSTOP) in the middle of a handler, start
//! another one on the same store, and check that a retry runs exactly once more after the lease
//! is taken over, and that the paused owner's late completion is refused (fencing).
//!
//! `POST /work` with an `Idempotency-Key` appends `start <pid> <key>` to the execution log,
//! sleeps `CRASH_HANDLER_MS`, appends `done <pid> <key>` and answers `200 {"pid":<pid>}`.
//!
//! Environment:
//! - `CRASH_STORE`: `memory` (default), `redis`, `sqlite`, `postgres`, `mysql` (the store's
//!   cargo feature must be enabled);
//! - `CRASH_URL`: the store's URL (a SQLite URL names the shared database file);
//! - `CRASH_TABLE`: the SQL table, or the Redis key prefix (default `crash_target`);
//! - `CRASH_LOG`: the execution log file (required);
//! - `CRASH_LEASE_MS` (1000), `CRASH_HANDLER_MS` (3000), `ADDR` (`127.0.0.1:0`).
//!
//! It prints `listening <addr>` on stdout once it accepts connections; logs go to stderr.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use idempotency_core::{BoxStore, MemoryStore};
use idempotency_tower::IdempotencyLayer;
use tokio::net::TcpListener;

struct Target {
    log: PathBuf,
    handler: Duration,
}

impl Target {
    fn append(&self, line: &str) -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        // One write per line: O_APPEND keeps lines from concurrent processes whole.
        file.write_all(format!("{line}\n").as_bytes())?;
        file.sync_data()
    }
}

async fn work(State(target): State<Arc<Target>>, headers: HeaderMap) -> (StatusCode, String) {
    let pid = std::process::id();
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .trim_matches('"')
        .to_owned();
    if let Err(error) = target.append(&format!("start {pid} {key}")) {
        return (StatusCode::INTERNAL_SERVER_ERROR, format!("log: {error}"));
    }
    tokio::time::sleep(target.handler).await;
    if let Err(error) = target.append(&format!("done {pid} {key}")) {
        return (StatusCode::INTERNAL_SERVER_ERROR, format!("log: {error}"));
    }
    (StatusCode::OK, format!("{{\"pid\":{pid}}}"))
}

fn env_ms(name: &str, default: u64) -> Result<Duration, String> {
    match std::env::var(name) {
        Ok(text) => text
            .parse()
            .map(Duration::from_millis)
            .map_err(|e| format!("{name}: {e}")),
        Err(_) => Ok(Duration::from_millis(default)),
    }
}

async fn store(kind: &str, url: Option<String>, table: &str) -> Result<BoxStore, String> {
    let url = url.ok_or_else(|| format!("CRASH_URL is required for CRASH_STORE={kind}"));
    let _ = (&url, table);
    match kind {
        "" | "memory" => Ok(BoxStore::new(MemoryStore::new())),
        #[cfg(feature = "redis")]
        "redis" => {
            let store = idempotency_redis::RedisStore::connect(&url?)
                .await
                .map_err(|e| e.to_string())?
                .with_key_prefix(format!("{table}:"));
            Ok(BoxStore::new(store))
        }
        #[cfg(feature = "sqlite")]
        "sqlite" => {
            use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
            let options = url?
                .parse::<SqliteConnectOptions>()
                .map_err(|e| e.to_string())?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .busy_timeout(Duration::from_secs(10));
            let pool = SqlitePoolOptions::new()
                .max_connections(2)
                .connect_with(options)
                .await
                .map_err(|e| e.to_string())?;
            let store = idempotency_sql::SqliteStore::new(pool)
                .with_table_name(table)
                .map_err(|e| e.to_string())?;
            store.migrate().await.map_err(|e| e.to_string())?;
            Ok(BoxStore::new(store))
        }
        #[cfg(feature = "postgres")]
        "postgres" => {
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(2)
                .connect(&url?)
                .await
                .map_err(|e| e.to_string())?;
            let store = idempotency_sql::PostgresStore::new(pool)
                .with_table_name(table)
                .map_err(|e| e.to_string())?;
            store.migrate().await.map_err(|e| e.to_string())?;
            Ok(BoxStore::new(store))
        }
        #[cfg(feature = "mysql")]
        "mysql" => {
            let pool = sqlx::mysql::MySqlPoolOptions::new()
                .max_connections(2)
                .connect(&url?)
                .await
                .map_err(|e| e.to_string())?;
            let store = idempotency_sql::MySqlStore::new(pool)
                .with_table_name(table)
                .map_err(|e| e.to_string())?;
            store.migrate().await.map_err(|e| e.to_string())?;
            Ok(BoxStore::new(store))
        }
        other => Err(format!(
            "CRASH_STORE={other} is unknown or its cargo feature is disabled"
        )),
    }
}

async fn run() -> Result<(), String> {
    let log = std::env::var_os("CRASH_LOG").ok_or("CRASH_LOG is required")?;
    let target = Arc::new(Target {
        log: PathBuf::from(log),
        handler: env_ms("CRASH_HANDLER_MS", 3000)?,
    });
    let lease = env_ms("CRASH_LEASE_MS", 1000)?;
    let kind = std::env::var("CRASH_STORE").unwrap_or_default();
    let table = std::env::var("CRASH_TABLE").unwrap_or_else(|_| "crash_target".to_owned());
    let store = store(&kind, std::env::var("CRASH_URL").ok(), &table).await?;
    let layer = IdempotencyLayer::builder(store)
        .shared_scope()
        .namespace("crash")
        .lease(lease)
        .store_timeout(Duration::from_secs(2))
        .build();
    let router = Router::new()
        .route("/work", post(work))
        .with_state(target)
        .layer(layer);
    let addr = std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:0".to_owned());
    let listener = TcpListener::bind(&addr)
        .await
        .map_err(|e| format!("{addr}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    println!("listening {local}");
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    axum::serve(listener, router)
        .await
        .map_err(|e| e.to_string())
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("crash_target: {error}");
            ExitCode::from(2)
        }
    }
}
