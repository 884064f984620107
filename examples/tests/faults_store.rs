//! Store faults under load, through the HTTP layer: the store is paused (SIGSTOP of a
//! `redis-server` this test started on a spare port), killed and restarted, or black-holed (a
//! TCP proxy this test owns in front of PostgreSQL / MySQL stops forwarding, then drops its
//! connections), or locked (SQLite: another connection holds the write lock).
//!
//! While the fault lasts every request is answered, none hangs (each is bounded by a generous
//! 15 s guard, far above the 1 s store timeout), and each answer is the handler's 201 or a
//! 503 with `Retry-After`; a 503 never ran the handler. Once the fault is removed the service
//! recovers on its own (same process, same pool), and every key refused with 503 runs exactly
//! once on retry. The shared servers on the standard ports are never stopped.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Its helpers serve the server-backed tests: without their features they go unused.
#![cfg_attr(
    not(any(
        feature = "redis",
        feature = "postgres",
        feature = "mysql",
        feature = "sqlite"
    )),
    allow(dead_code, unused_imports)
)]

mod hardening_support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::routing::post;
use hardening_support::*;
use idempotency_core::Store;
use idempotency_tower::IdempotencyLayer;
use tower::ServiceExt;

const STORE_TIMEOUT: Duration = Duration::from_secs(1);
const HANG_GUARD: Duration = Duration::from_secs(15);
const LOAD: usize = 40;

type Executions = Arc<Mutex<HashMap<String, u32>>>;

async fn pay(State(executions): State<Executions>, headers: HeaderMap) -> StatusCode {
    let key = headers["idempotency-key"].to_str().unwrap().to_owned();
    *executions.lock().unwrap().entry(key).or_default() += 1;
    StatusCode::CREATED
}

struct Harness {
    app: Router,
    executions: Executions,
    run: String,
}

impl Harness {
    fn new<S: Store>(store: S) -> Self {
        Self::with_timeout(store, STORE_TIMEOUT)
    }

    fn with_timeout<S: Store>(store: S, store_timeout: Duration) -> Self {
        let executions: Executions = Arc::default();
        let layer = IdempotencyLayer::builder(store)
            .namespace(unique("faults"))
            .store_timeout(store_timeout)
            // A claim that reached the store while its caller timed out holds the key this long.
            .lease(Duration::from_secs(2))
            .build();
        let app = Router::new()
            .route("/pay", post(pay))
            .with_state(executions.clone())
            .layer(layer);
        Self {
            app,
            executions,
            run: unique("f"),
        }
    }

    fn runs(&self, key: &str) -> u32 {
        self.executions
            .lock()
            .unwrap()
            .get(key)
            .copied()
            .unwrap_or(0)
    }

    /// One request, bounded by the hang guard.
    async fn send(&self, key: &str) -> (StatusCode, HeaderMap) {
        let request = Request::post("/pay")
            .header("idempotency-key", key)
            .body(Body::from("{}"))
            .unwrap();
        let response = tokio::time::timeout(HANG_GUARD, self.app.clone().oneshot(request))
            .await
            .unwrap_or_else(|_| panic!("request {key} hung"))
            .unwrap();
        (response.status(), response.headers().clone())
    }

    /// `LOAD` concurrent new keys; returns (201s, 503s).
    async fn load(self: &Arc<Self>, phase: &str) -> (Vec<String>, Vec<String>) {
        let tasks: Vec<_> = (0..LOAD)
            .map(|i| {
                let this = self.clone();
                let key = format!("{}-{phase}-{i}", self.run);
                tokio::spawn(async move {
                    let (status, headers) = this.send(&key).await;
                    (key, status, headers)
                })
            })
            .collect();
        let (mut ok, mut refused) = (Vec::new(), Vec::new());
        for task in tasks {
            let (key, status, headers) = task.await.unwrap();
            match status {
                StatusCode::CREATED => ok.push(key),
                StatusCode::SERVICE_UNAVAILABLE => {
                    assert!(
                        headers.contains_key("retry-after"),
                        "503 without Retry-After"
                    );
                    assert_eq!(self.runs(&key), 0, "a 503 ran the handler for {key}");
                    refused.push(key);
                }
                other => panic!("{key}: unexpected {other}"),
            }
        }
        (ok, refused)
    }

    /// Waits (bounded) until a fresh key is served again, without any restart.
    async fn recovered(&self) {
        for attempt in 0..200 {
            let key = format!("{}-probe-{attempt}", self.run);
            if self.send(&key).await.0 == StatusCode::CREATED {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the service did not recover");
    }

    /// Every key refused during the fault runs exactly once on retry (a claim that reached the
    /// store after its caller gave up holds the key until its 2 s lease ends: 409 meanwhile).
    async fn retry_refused(&self, refused: &[String]) {
        for key in refused {
            let mut done = false;
            for _ in 0..100 {
                let (status, headers) = self.send(key).await;
                match status {
                    StatusCode::CREATED => {
                        done = true;
                        break;
                    }
                    StatusCode::CONFLICT | StatusCode::SERVICE_UNAVAILABLE => {
                        assert!(headers.contains_key("retry-after"));
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    other => panic!("{key}: unexpected {other}"),
                }
            }
            assert!(done, "{key} never ran after recovery");
            assert_eq!(self.runs(key), 1, "{key} ran {} times", self.runs(key));
            // And its retry now replays.
            let (status, headers) = self.send(key).await;
            assert_eq!(status, StatusCode::CREATED);
            assert!(headers.contains_key("idempotent-replayed"));
            assert_eq!(self.runs(key), 1);
        }
    }

    fn assert_none_ran_twice(&self) {
        let executions = self.executions.lock().unwrap();
        assert!(
            executions.values().all(|n| *n == 1),
            "some key ran twice: {:?}",
            executions
                .iter()
                .filter(|(_, n)| **n > 1)
                .collect::<Vec<_>>()
        );
    }
}

/// The full scenario: healthy load, fault, load during the fault, heal, recovery, retries.
async fn scenario(harness: Harness, fault: impl AsyncFnOnce(), heal: impl AsyncFnOnce()) {
    let harness = Arc::new(harness);
    let (ok, refused) = harness.load("before").await;
    assert_eq!((ok.len(), refused.len()), (LOAD, 0), "healthy store");

    fault().await;
    let (_, refused) = harness.load("during").await;
    assert!(
        !refused.is_empty(),
        "the fault must be visible as 503s (none refused)"
    );
    heal().await;

    harness.recovered().await;
    let (ok, refused_after) = harness.load("after").await;
    assert_eq!((ok.len(), refused_after.len()), (LOAD, 0), "recovered");
    harness.retry_refused(&refused).await;
    harness.assert_none_ran_twice();
}

#[cfg(feature = "redis")]
mod redis {
    use super::*;
    use std::process::{Child, Command, Stdio};

    /// A `redis-server` of this test, on a spare loopback port; killed when dropped.
    struct OwnRedis {
        child: Child,
        port: u16,
    }

    impl OwnRedis {
        fn start(port: u16) -> Option<Self> {
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            match child {
                Ok(child) => Some(Self { child, port }),
                Err(error) => idempotency_core::testing::unavailable("redis-server", error),
            }
        }

        async fn up(self) -> Self {
            for _ in 0..200 {
                if tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                    .await
                    .is_ok()
                {
                    return self;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            panic!("redis-server on {} did not start", self.port);
        }

        fn signal(&self, signal: &str) {
            let status = Command::new("kill")
                .arg(format!("-{signal}"))
                .arg(self.child.id().to_string())
                .status()
                .unwrap();
            assert!(status.success());
        }

        fn url(&self) -> String {
            format!("redis://127.0.0.1:{}", self.port)
        }
    }

    impl Drop for OwnRedis {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn redis_paused_answers_503_then_recovers() {
        let Some(server) = OwnRedis::start(free_port()) else {
            return;
        };
        let server = Arc::new(server.up().await);
        let store = idempotency_core::redis::RedisStore::connect(&server.url())
            .await
            .unwrap();
        let (a, b) = (server.clone(), server.clone());
        scenario(
            Harness::new(store),
            async move || a.signal("STOP"),
            async move || b.signal("CONT"),
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn redis_killed_and_restarted_answers_503_then_recovers() {
        let port = free_port();
        let Some(server) = OwnRedis::start(port) else {
            return;
        };
        let server = server.up().await;
        let store = idempotency_core::redis::RedisStore::connect(&server.url())
            .await
            .unwrap();
        let slot = Arc::new(Mutex::new(Some(server)));
        let (a, b) = (slot.clone(), slot.clone());
        scenario(
            Harness::new(store),
            async move || drop(a.lock().unwrap().take()),
            async move || {
                let restarted = OwnRedis::start(port).unwrap().up().await;
                *b.lock().unwrap() = Some(restarted);
            },
        )
        .await;
    }
}

/// A TCP proxy this test owns: forwards to `upstream` until black-holed; while black-holed it
/// accepts and holds connections without forwarding a byte (old and new ones), and when opened
/// again it drops every connection it held.
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod proxy {
    use std::net::SocketAddr;

    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::watch;

    pub(crate) struct Proxy {
        pub(crate) addr: SocketAddr,
        open: watch::Sender<bool>,
    }

    impl Proxy {
        pub(crate) async fn start(upstream: String) -> Self {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let (open, watcher) = watch::channel(true);
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    tokio::spawn(serve(client, upstream.clone(), watcher.clone()));
                }
            });
            Self { addr, open }
        }

        pub(crate) fn black_hole(&self) {
            self.open.send_replace(false);
        }

        pub(crate) fn open(&self) {
            self.open.send_replace(true);
        }
    }

    async fn serve(mut client: TcpStream, upstream: String, mut open: watch::Receiver<bool>) {
        if !*open.borrow() {
            // Black hole: hold the connection, answer nothing, drop it when reopened.
            let _ = open.wait_for(|open| *open).await;
            return;
        }
        let Ok(mut server) = TcpStream::connect(&upstream).await else {
            return;
        };
        let frozen = tokio::select! {
            _ = tokio::io::copy_bidirectional(&mut client, &mut server) => false,
            _ = open.wait_for(|open| !*open) => true,
        };
        if frozen {
            // Frozen mid-stream: nothing more is forwarded until reopened, then dropped.
            let _ = open.wait_for(|open| *open).await;
        }
    }
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread")]
async fn postgres_black_holed_answers_503_then_recovers() {
    let url = postgres_url();
    if !reachable("PostgreSQL", &url) {
        return;
    }
    let proxy = Arc::new(proxy::Proxy::start(host_port(&url)).await);
    let proxied = url.replacen(&host_port(&url), &proxy.addr.to_string(), 1);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(1))
        .connect(&proxied)
        .await
        .unwrap();
    let table = unique("faults");
    let store = idempotency_core::sql::PostgresStore::new(pool)
        .with_table_name(&table)
        .unwrap();
    store.migrate().await.unwrap();
    let (a, b) = (proxy.clone(), proxy.clone());
    scenario(
        Harness::new(store),
        async move || a.black_hole(),
        async move || b.open(),
    )
    .await;
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread")]
async fn mysql_black_holed_answers_503_then_recovers() {
    let url = mysql_url();
    if !reachable("MySQL", &url) {
        return;
    }
    let proxy = Arc::new(proxy::Proxy::start(host_port(&url)).await);
    let proxied = url.replacen(&host_port(&url), &proxy.addr.to_string(), 1);
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(1))
        .connect(&proxied)
        .await
        .unwrap();
    let table = unique("faults");
    let store = idempotency_core::sql::MySqlStore::new(pool)
        .with_table_name(&table)
        .unwrap();
    store.migrate().await.unwrap();
    let (a, b) = (proxy.clone(), proxy.clone());
    scenario(
        Harness::new(store),
        async move || a.black_hole(),
        async move || b.open(),
    )
    .await;
}

/// SQLite has no server to stop: the fault is another connection holding the write lock
/// (`BEGIN EXCLUSIVE`) for longer than the store timeout (the pool waits up to its 10 s busy
/// timeout, the layer gives up after 2 s).
#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread")]
async fn sqlite_write_locked_answers_503_then_recovers() {
    use sqlx::Connection;
    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
    let path = temp_path("faults_sqlite", "db");
    let options = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(10));
    let pool = SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options.clone())
        .await
        .unwrap();
    let store = idempotency_core::sql::SqliteStore::new(pool);
    store.migrate().await.unwrap();
    let locker = Arc::new(tokio::sync::Mutex::new(
        sqlx::SqliteConnection::connect_with(&options)
            .await
            .unwrap(),
    ));
    let (a, b) = (locker.clone(), locker.clone());
    // SQLite serialises writers: 40 concurrent claims on a loaded machine need more than
    // 1 s; the lock below is held far longer than this 2 s bound.
    scenario(
        Harness::with_timeout(store, Duration::from_secs(2)),
        async move || {
            let mut connection = a.lock().await;
            sqlx::query("BEGIN EXCLUSIVE")
                .execute(&mut *connection)
                .await
                .unwrap();
        },
        async move || {
            let mut connection = b.lock().await;
            sqlx::query("ROLLBACK")
                .execute(&mut *connection)
                .await
                .unwrap();
        },
    )
    .await;
    let _ = std::fs::remove_file(&path);
}
