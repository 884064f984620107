//! The gRPC preset over real HTTP/2 (hyper server and client, no tonic): trailers of a replay
//! and trailers-only refusals survive the wire.
#![cfg(feature = "grpc")]
#![allow(clippy::unwrap_used)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use idempotency_core::MemoryStore;
use idempotency_tower::{IdempotencyLayer, RequestBody};
use tokio::net::{TcpListener, TcpStream};
use tower::{Layer, service_fn};

const PAY: &str = "/payments.v1.Payments/Pay";

fn frame(message: &[u8]) -> Bytes {
    let mut framed = BytesMut::with_capacity(5 + message.len());
    framed.put_u8(0);
    framed.put_u32(message.len() as u32);
    framed.put_slice(message);
    framed.freeze()
}

async fn serve(calls: Arc<AtomicUsize>) -> SocketAddr {
    let server = service_fn(move |request: Request<RequestBody<Incoming>>| {
        let calls = Arc::clone(&calls);
        async move {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            let received = request.into_body().collect().await.unwrap().to_bytes();
            let mut trailers = HeaderMap::new();
            trailers.insert("grpc-status", HeaderValue::from_static("0"));
            trailers.insert("x-ledger-entry", HeaderValue::from(n));
            let reply = frame(format!("paid {} bytes, call {n}", received.len()).as_bytes());
            let body: UnsyncBoxBody<Bytes, Infallible> = Full::new(reply)
                .with_trailers(async move { Some(Ok(trailers)) })
                .boxed_unsync();
            let response = Response::builder()
                .header("content-type", "application/grpc")
                .body(body)
                .unwrap();
            Ok::<_, Infallible>(response)
        }
    });
    let service = IdempotencyLayer::builder(MemoryStore::new())
        .grpc()
        .shared_scope()
        .build()
        .layer(server);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let service = TowerToHyperService::new(service.clone());
            tokio::spawn(async move {
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

struct Answer {
    headers: HeaderMap,
    body: Bytes,
    trailers: Option<HeaderMap>,
}

async fn unary(addr: SocketAddr, key: Option<&str>, message: &[u8]) -> Answer {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    let mut request = Request::post(format!("http://{addr}{PAY}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let response = sender
        .send_request(request.body(Full::new(frame(message))).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let (parts, body) = response.into_parts();
    let collected = body.collect().await.unwrap();
    Answer {
        headers: parts.headers,
        trailers: collected.trailers().cloned(),
        body: collected.to_bytes(),
    }
}

#[tokio::test]
async fn replays_keep_their_trailers_over_http2() {
    let calls = Arc::new(AtomicUsize::new(0));
    let addr = serve(Arc::clone(&calls)).await;
    let first = unary(addr, Some("pay-1"), b"amount=10").await;
    let first_trailers = first.trailers.clone().unwrap();
    assert_eq!(first_trailers["grpc-status"], "0");
    assert_eq!(first_trailers["x-ledger-entry"], "1");

    let replay = unary(addr, Some("pay-1"), b"amount=10").await;
    assert_eq!(replay.headers["idempotent-replayed"], "true");
    assert_eq!(replay.headers["content-type"], "application/grpc");
    assert_eq!(replay.body, first.body);
    assert_eq!(replay.trailers.unwrap(), first_trailers);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn refusals_are_trailers_only_over_http2() {
    let calls = Arc::new(AtomicUsize::new(0));
    let addr = serve(Arc::clone(&calls)).await;
    let missing = unary(addr, None, b"amount=10").await;
    assert!(missing.body.is_empty());
    assert!(
        missing.trailers.is_none(),
        "trailers-only: the status is in the headers"
    );
    assert_eq!(missing.headers["grpc-status"], "3");

    unary(addr, Some("pay-2"), b"amount=10").await;
    let mismatch = unary(addr, Some("pay-2"), b"amount=99").await;
    assert_eq!(mismatch.headers["grpc-status"], "9");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}
