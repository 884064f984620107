//! The layer over real TCP: axum served by hyper, a hyper client, raw sockets that hang up.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use common::{Calls, routes, unique};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use idempotency_core::MemoryStore;
use idempotency_tower::{IdempotencyLayer, IdempotencyLayerBuilder, ScopeChosen};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

type Builder = IdempotencyLayerBuilder<Arc<MemoryStore>, ScopeChosen>;

struct Server {
    addr: SocketAddr,
    calls: Arc<Calls>,
    store: Arc<MemoryStore>,
    client: Client<HttpConnector, Full<Bytes>>,
}

async fn serve(configure: impl FnOnce(Builder) -> Builder) -> Server {
    let store = Arc::new(MemoryStore::new());
    let calls = Arc::new(Calls::default());
    let layer = configure(IdempotencyLayer::builder(Arc::clone(&store)).shared_scope()).build();
    let app = routes(Arc::clone(&calls)).layer(layer);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let client = Client::builder(TokioExecutor::new()).build_http();
    Server {
        addr,
        calls,
        store,
        client,
    }
}

impl Server {
    async fn post(
        &self,
        path: &str,
        key: Option<&str>,
        body: &str,
    ) -> (u16, http::HeaderMap, Bytes) {
        let mut request = http::Request::post(format!("http://{}{path}", self.addr))
            .header("content-type", "application/json");
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        let request = request
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap();
        let response = self.client.request(request).await.unwrap();
        let (parts, body) = response.into_parts();
        (
            parts.status.as_u16(),
            parts.headers,
            body.collect().await.unwrap().to_bytes(),
        )
    }
}

#[tokio::test]
async fn first_request_and_replay_over_tcp() {
    let server = serve(|b| b).await;
    let key = unique("tcp");
    let (status, headers, body) = server.post("/orders", Some(&key), r#"{"n":1}"#).await;
    assert_eq!(status, 201);
    assert_eq!(headers["set-cookie"], "session=s3cr3t");
    let (replay_status, replay_headers, replay_body) =
        server.post("/orders", Some(&key), r#"{"n":1}"#).await;
    assert_eq!(replay_status, 201);
    assert_eq!(replay_body, body);
    assert_eq!(replay_headers["idempotent-replayed"], "true");
    assert_eq!(replay_headers["x-order-id"], headers["x-order-id"]);
    assert_eq!(replay_headers["location"], headers["location"]);
    assert_eq!(replay_headers["content-type"], headers["content-type"]);
    assert!(!replay_headers.contains_key("set-cookie"));
    // The handler's own Date was not stored; the server stamps the replay afresh.
    assert_eq!(headers["date"], "Mon, 30 Nov 2026 06:00:00 GMT");
    assert_ne!(replay_headers["date"], "Mon, 30 Nov 2026 06:00:00 GMT");
    assert_eq!(server.calls.orders.load(Ordering::SeqCst), 1);

    let (status, _, other) = server.post("/orders", Some(&key), r#"{"n":2}"#).await;
    assert_eq!(status, 422);
    assert!(String::from_utf8_lossy(&other).contains("key-reused"));
}

#[tokio::test]
async fn in_flight_duplicate_over_tcp_is_409() {
    let server = Arc::new(serve(|b| b).await);
    let key = unique("tcp-held");
    let first = {
        let (server, key) = (Arc::clone(&server), key.clone());
        tokio::spawn(async move { server.post("/held", Some(&key), "{}").await })
    };
    server.calls.held_started.notified().await;
    let (status, headers, _) = server.post("/held", Some(&key), "{}").await;
    assert_eq!(status, 409);
    assert!(headers.contains_key("retry-after"));
    assert_eq!(headers["content-type"], "application/problem+json");
    server.calls.held_release.notify_one();
    assert_eq!(first.await.unwrap().0, 200);
}

#[tokio::test]
async fn client_disconnect_mid_handler_still_completes_and_replays() {
    let server = serve(|b| b.wait_in_flight(Duration::from_secs(10))).await;
    let key = unique("hangup");
    let mut socket = TcpStream::connect(server.addr).await.unwrap();
    let request = format!(
        "POST /slow?ms=300 HTTP/1.1\r\nhost: test\r\nidempotency-key: {key}\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{{}}"
    );
    socket.write_all(request.as_bytes()).await.unwrap();
    server.calls.slow_started.notified().await;
    drop(socket);

    tokio::time::timeout(
        Duration::from_secs(10),
        server.calls.slow_finished.notified(),
    )
    .await
    .expect("the handler ran to its end although the client hung up");
    let (status, headers, body) = server.post("/slow?ms=300", Some(&key), "{}").await;
    assert_eq!(status, 200);
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(body, "slow 1");
    assert_eq!(server.calls.slow.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn client_disconnect_keeps_the_lease_renewed_until_the_handler_ends() {
    // The handler outlives its client and several leases: once the request's future is
    // dropped the handler goes on in the background, and its lease is still renewed there, so a
    // duplicate long after the first lease would have ended is refused instead of taking over.
    // A lease of 1 s renewed every third of it leaves 2/3 s of slack for a loaded CI machine.
    let server = serve(|b| b.lease(Duration::from_millis(1000))).await;
    let key = unique("hangup-lease");
    let mut socket = TcpStream::connect(server.addr).await.unwrap();
    let request = format!(
        "POST /held HTTP/1.1\r\nhost: test\r\nidempotency-key: {key}\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{{}}"
    );
    socket.write_all(request.as_bytes()).await.unwrap();
    server.calls.held_started.notified().await;
    drop(socket);
    tokio::time::sleep(Duration::from_millis(3300)).await;

    // A takeover would run the held handler again and never answer: bound the wait.
    let (status, headers, _) = tokio::time::timeout(
        Duration::from_secs(10),
        server.post("/held", Some(&key), "{}"),
    )
    .await
    .expect("the duplicate was answered (a takeover would hang in the held handler)");
    assert_eq!(status, 409);
    assert!(headers.contains_key("retry-after"));
    assert_eq!(server.calls.held.load(Ordering::SeqCst), 1);

    server.calls.held_release.notify_one();
    // The handler finishes in the background and its response is stored for the retry.
    let replay = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let (status, headers, body) = server.post("/held", Some(&key), "{}").await;
            if status != 409 {
                return (status, headers, body);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the handler finished and its response was stored");
    assert_eq!(replay.0, 200);
    assert_eq!(replay.1["idempotent-replayed"], "true");
    assert_eq!(replay.2, "held 1");
    assert_eq!(server.calls.held.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn chunked_body_over_the_limit_is_413() {
    let server = serve(|b| b.max_body_bytes(10)).await;
    let mut socket = TcpStream::connect(server.addr).await.unwrap();
    let request = "POST /orders HTTP/1.1\r\nhost: test\r\nidempotency-key: big\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n6\r\nabcdef\r\n6\r\nghijkl\r\n0\r\n\r\n";
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    socket.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("application/problem+json"));
    assert_eq!(server.calls.orders.load(Ordering::SeqCst), 0);
    assert!(server.store.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_duplicates_over_tcp_run_once() {
    // All may wait (beyond the default bound of 128, they would be answered 409 at once).
    let server = Arc::new(
        serve(|b| {
            b.wait_in_flight(Duration::from_secs(30))
                .max_waiters_per_key(200)
        })
        .await,
    );
    let key = unique("tcp-burst");
    let requests: Vec<_> = (0..200)
        .map(|_| {
            let (server, key) = (Arc::clone(&server), key.clone());
            tokio::spawn(async move { server.post("/slow?ms=100", Some(&key), "{}").await })
        })
        .collect();
    let mut replayed = 0;
    for request in requests {
        let (status, headers, body) = request.await.unwrap();
        assert_eq!(status, 200);
        assert_eq!(body, "slow 1");
        replayed += usize::from(headers.contains_key("idempotent-replayed"));
    }
    assert_eq!(replayed, 199);
    assert_eq!(server.calls.slow.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_declared_length_over_the_limit_is_refused_before_the_body_arrives() {
    let server = serve(|b| b.max_body_bytes(1024)).await;
    let key = unique("declared");
    let mut socket = TcpStream::connect(server.addr).await.unwrap();
    // A million bytes announced, four sent: the answer cannot wait for the rest.
    let head = format!(
        "POST /orders HTTP/1.1\r\nhost: test\r\nidempotency-key: {key}\r\ncontent-type: application/json\r\ncontent-length: 1000000\r\n\r\n{{\"n\""
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let n = socket.read(&mut buffer).await.unwrap();
            answer.extend_from_slice(&buffer[..n]);
            if n == 0 || answer.windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
    })
    .await;
    assert!(read.is_ok(), "no answer while the body is still owed");
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(text.contains("application/problem+json"), "{text}");
    assert_eq!(server.calls.orders.load(Ordering::SeqCst), 0);
    assert!(server.store.is_empty());
}
