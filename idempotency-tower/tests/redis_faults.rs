//! Redis going away under the HTTP layers: the idempotency layer and the token layer answer
//! 503 + `Retry-After` (fail-closed, handler not run) while Redis is down, and work again once
//! it is back. Runs against a `redis-server` this test starts and kills on a free loopback port.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::post;
use http::{Request, StatusCode};
use idempotency_core::Scope;
use idempotency_redis::{RedisStore, RedisTokenStore};
use idempotency_test::unavailable;
use idempotency_token::TokenStore;
use idempotency_tower::{IDEMPOTENCY_TOKEN, IdempotencyLayer, TokenLayer};
use tower::ServiceExt;

/// A `redis-server` child process, killed when dropped.
struct Server(Child);

impl Server {
    fn start(port: u16) -> std::io::Result<Self> {
        Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map(Self)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

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

fn counted(runs: &Arc<AtomicUsize>) -> axum::routing::MethodRouter {
    let runs = Arc::clone(runs);
    post(move || {
        let runs = Arc::clone(&runs);
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            (StatusCode::CREATED, "done")
        }
    })
}

fn pay(key: &str) -> Request<Body> {
    Request::post("/pay")
        .header("idempotency-key", key)
        .body(Body::from("{\"amount\":1}"))
        .unwrap()
}

fn checkout(token: &str) -> Request<Body> {
    Request::post("/checkout")
        .header(IDEMPOTENCY_TOKEN, token)
        .body(Body::empty())
        .unwrap()
}

fn assert_unavailable(response: &http::Response<Body>) {
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(response.headers().contains_key("retry-after"));
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layers_answer_503_while_redis_is_down_and_recover() {
    let port = free_port();
    let server = match Server::start(port) {
        Ok(server) => server,
        Err(error) => return unavailable::<()>("redis-server binary", error).unwrap_or(()),
    };
    assert!(wait_until_up(port).await, "redis-server did not start");
    let url = format!("redis://127.0.0.1:{port}");
    let limit = Duration::from_millis(500);
    let store = RedisStore::connect(&url)
        .await
        .unwrap()
        .with_call_timeout(limit);
    let tokens =
        Arc::new(RedisTokenStore::new(store.connection().clone()).with_call_timeout(limit));
    let (payments, orders) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let app = Router::new()
        .route(
            "/pay",
            counted(&payments).layer(
                IdempotencyLayer::builder(store)
                    .shared_scope()
                    .namespace("faults")
                    .store_timeout(Duration::from_secs(1))
                    .build(),
            ),
        )
        .route(
            "/checkout",
            counted(&orders).layer(TokenLayer::new(Arc::clone(&tokens), "faults")),
        );
    let scope = Scope::new("faults");

    assert_eq!(
        app.clone().oneshot(pay("k1")).await.unwrap().status(),
        StatusCode::CREATED
    );
    let token = tokens.issue(&scope, Duration::from_secs(60)).await.unwrap();

    drop(server);

    let response = app.clone().oneshot(pay("k2")).await.unwrap();
    assert_unavailable(&response);
    let response = app.clone().oneshot(checkout(&token.value)).await.unwrap();
    assert_unavailable(&response);
    assert_eq!(
        payments.load(Ordering::SeqCst),
        1,
        "fail-closed: the handler did not run"
    );
    assert_eq!(
        orders.load(Ordering::SeqCst),
        0,
        "fail-closed: the handler did not run"
    );

    let _server = Server::start(port).unwrap();
    assert!(wait_until_up(port).await, "redis-server did not restart");
    let mut status = StatusCode::SERVICE_UNAVAILABLE;
    for _ in 0..100 {
        status = app.clone().oneshot(pay("k3")).await.unwrap().status();
        if status != StatusCode::SERVICE_UNAVAILABLE {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        status,
        StatusCode::CREATED,
        "the layer recovers once Redis is back"
    );
    let replay = app.clone().oneshot(pay("k3")).await.unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(payments.load(Ordering::SeqCst), 2);

    let token = tokens.issue(&scope, Duration::from_secs(60)).await.unwrap();
    assert_eq!(
        app.clone()
            .oneshot(checkout(&token.value))
            .await
            .unwrap()
            .status(),
        StatusCode::CREATED
    );
    assert_eq!(
        app.oneshot(checkout(&token.value)).await.unwrap().status(),
        StatusCode::CONFLICT
    );
    assert_eq!(orders.load(Ordering::SeqCst), 1);
}
