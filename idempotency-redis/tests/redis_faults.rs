//! Redis going away mid-run: store calls fail fast with `Unavailable`/`Timeout` (no hang, no
//! panic), and the store recovers by itself once Redis is back. Runs against a `redis-server`
//! this test starts, pauses and kills on a free loopback port.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use idempotency_core::{
    Claim, ClaimRequest, CompleteRequest, Fingerprint, Lease, Outcome, Scope, Store, StoreError,
};
use idempotency_redis::{RedisStore, RedisTokenStore};
use idempotency_test::{unavailable, unique_key};
use idempotency_token::{TokenOutcome, TokenStore};

/// A `redis-server` child process, killed when dropped.
struct Server {
    child: Child,
}

impl Server {
    fn start(port: u16) -> std::io::Result<Self> {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        Ok(Self { child })
    }

    /// Sends `signal` (`STOP`, `CONT`) to the server.
    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal}");
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
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

/// Waits (bounded) until the server accepts connections.
async fn wait_until_up(port: u16) -> bool {
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// A server on a free port, and a store and a token store over one connection to it, each call
/// bounded by `call_timeout`; `None` (with the reason printed) where `redis-server` is missing
/// outside CI.
async fn started(call_timeout: Duration) -> Option<(Server, u16, RedisStore, RedisTokenStore)> {
    let port = free_port();
    let server = match Server::start(port) {
        Ok(server) => server,
        Err(error) => return unavailable("redis-server binary", error),
    };
    assert!(wait_until_up(port).await, "redis-server did not start");
    let store = RedisStore::connect(&format!("redis://127.0.0.1:{port}"))
        .await
        .unwrap()
        .with_call_timeout(call_timeout);
    let tokens = RedisTokenStore::new(store.connection().clone()).with_call_timeout(call_timeout);
    Some((server, port, store, tokens))
}

fn request<'a>(key: &'a idempotency_core::StorageKey, fp: &'a Fingerprint) -> ClaimRequest<'a> {
    ClaimRequest {
        key,
        namespace: "faults",
        fingerprint: fp,
        lease: Duration::from_secs(30),
        claim_id: idempotency_core::ClaimId::random(),
        mechanism: None,
        key_derivation: None,
    }
}

async fn acquire(store: &RedisStore, fp: &Fingerprint) -> Result<Lease, StoreError> {
    let key = unique_key();
    match store.claim(request(&key, fp)).await? {
        Claim::Acquired(lease) => {
            store
                .complete(CompleteRequest {
                    key: &key,
                    token: lease.token,
                    outcome: &Outcome::new(200, "ok"),
                    ttl: Duration::from_secs(30),
                })
                .await?;
            Ok(lease)
        }
        other => panic!("a fresh key is acquired, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_fails_fast_while_redis_is_down_and_recovers() {
    let call_timeout = Duration::from_millis(500);
    let Some((server, port, store, tokens)) = started(call_timeout).await else {
        return;
    };
    let fp = Fingerprint::of_bytes(b"faults");
    let scope = Scope::new("faults");

    let before = acquire(&store, &fp).await.unwrap();
    let token = tokens.issue(&scope, Duration::from_secs(60)).await.unwrap();

    server.stop();

    // Every call answers with a transient error; the guard only proves none hangs.
    let guard = call_timeout * 10;
    for _ in 0..5 {
        let key = unique_key();
        let claimed = tokio::time::timeout(guard, store.claim(request(&key, &fp)))
            .await
            .expect("a claim while Redis is down must not hang");
        assert!(
            matches!(
                claimed,
                Err(StoreError::Unavailable(_) | StoreError::Timeout(_))
            ),
            "claim while Redis is down: {claimed:?}"
        );
        let read = tokio::time::timeout(guard, store.get(&key))
            .await
            .expect("no hang");
        assert!(
            read.as_ref().is_err_and(StoreError::is_transient),
            "{read:?}"
        );
        let consumed = tokio::time::timeout(guard, tokens.consume(&scope, &token.value))
            .await
            .expect("no hang");
        assert!(
            consumed.as_ref().is_err_and(StoreError::is_transient),
            "{consumed:?}"
        );
    }

    // Back on the same port, empty (no persistence): the same store recovers by itself.
    let _server = Server::start(port).unwrap();
    assert!(wait_until_up(port).await, "redis-server did not restart");
    let mut after = None;
    for _ in 0..100 {
        match acquire(&store, &fp).await {
            Ok(lease) => {
                after = Some(lease);
                break;
            }
            Err(error) => {
                assert!(
                    error.is_transient(),
                    "only transient errors while reconnecting: {error}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let after = after.expect("the store recovers once Redis is back");
    assert!(
        after.token > before.token,
        "fencing tokens keep growing across a Redis restart that lost every record"
    );
    let token = tokens.issue(&scope, Duration::from_secs(60)).await.unwrap();
    assert_eq!(
        tokens.consume(&scope, &token.value).await.unwrap(),
        TokenOutcome::Consumed
    );
}

/// A server that accepts but does not answer (paused): the store's own bound is all that ends
/// each call, since its connection (`RedisStore::connect`) sets no timer per reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_calls_end_at_their_bound_while_redis_is_paused() {
    let call_timeout = Duration::from_millis(300);
    let Some((server, _, store, tokens)) = started(call_timeout).await else {
        return;
    };
    let fp = Fingerprint::of_bytes(b"paused");
    let scope = Scope::new("faults");
    let lease = acquire(&store, &fp).await.unwrap();
    let held = unique_key();
    let Claim::Acquired(held_lease) = store.claim(request(&held, &fp)).await.unwrap() else {
        panic!("a fresh key is acquired");
    };

    server.signal("STOP");
    let guard = call_timeout * 10;
    let timed_out = |error: Option<&StoreError>| matches!(error, Some(StoreError::Timeout(limit)) if *limit == call_timeout);
    let key = unique_key();
    let claimed = tokio::time::timeout(guard, store.claim(request(&key, &fp)))
        .await
        .expect("a claim to a paused server ends at its bound");
    assert!(timed_out(claimed.as_ref().err()), "{claimed:?}");
    let completed = tokio::time::timeout(
        guard,
        store.complete(CompleteRequest {
            key: &held,
            token: held_lease.token,
            outcome: &Outcome::new(200, "ok"),
            ttl: Duration::from_secs(30),
        }),
    )
    .await
    .expect("a complete to a paused server ends at its bound");
    assert!(timed_out(completed.as_ref().err()), "{completed:?}");
    let read = tokio::time::timeout(guard, store.get(&key))
        .await
        .expect("a read from a paused server ends at its bound");
    assert!(timed_out(read.as_ref().err()), "{read:?}");
    let issued = tokio::time::timeout(guard, tokens.issue(&scope, Duration::from_secs(60)))
        .await
        .expect("a token issued to a paused server ends at its bound");
    assert!(timed_out(issued.as_ref().err()), "{issued:?}");

    server.signal("CONT");
    let after = acquire(&store, &fp).await.unwrap();
    assert!(after.token > lease.token);
}
