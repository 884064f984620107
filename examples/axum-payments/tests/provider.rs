//! The checkout's payment provider: one capture per `Idempotency-Key` (the same key answers the
//! same capture, replayed), 422 for a key reused with another body, 400 without a valid key,
//! 402 for the declined order, and `GET /captures?order_id=N` counting distinct captures. In
//! process over real TCP, and once as the `provider` binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod hardening_support;

use std::net::SocketAddr;

use axum_payments::client::{Reply, post_json, send_once};
use axum_payments::provider::{Capture, Provider, captures_at};
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use serde_json::json;

/// Serves `provider` on a free port of this process.
async fn serve(provider: Provider) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, provider.router()).await });
    addr
}

/// `POST /captures` with `key` (none if `None`).
async fn capture(addr: SocketAddr, key: Option<&str>, order_id: i64, amount: i64) -> Reply {
    let body = json!({"order_id": order_id, "amount": amount});
    send_once(addr, post_json("/captures", key, &body).unwrap())
        .await
        .unwrap()
}

fn is_problem(reply: &Reply) -> bool {
    reply.content_type() == Some("application/problem+json")
}

#[tokio::test]
async fn one_capture_per_key() {
    let addr = serve(Provider::new()).await;
    let first = capture(addr, Some("k-1"), 7, 1299).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert!(!first.is_replay());
    let captured: Capture = first.json().unwrap();
    assert!(captured.capture_id.starts_with("cap_"), "{captured:?}");
    assert_eq!((captured.order_id, captured.amount), (7, 1299));

    let again = capture(addr, Some("k-1"), 7, 1299).await;
    assert_eq!(again.status, StatusCode::CREATED);
    assert!(again.is_replay());
    assert_eq!(again.body, first.body, "the same capture");

    let counted = captures_at(addr, 7).await.unwrap();
    assert_eq!(counted.captures, 1);
    assert_eq!(counted.capture_ids, vec![captured.capture_id.clone()]);

    // Another key is another capture, of the same order.
    let other = capture(addr, Some("k-2"), 7, 1299).await;
    assert_eq!(other.status, StatusCode::CREATED);
    assert!(!other.is_replay());
    let other: Capture = other.json().unwrap();
    assert_ne!(other.capture_id, captured.capture_id);
    assert_eq!(captures_at(addr, 7).await.unwrap().captures, 2);
    assert_eq!(captures_at(addr, 8).await.unwrap().captures, 0);
}

#[tokio::test]
async fn a_key_reused_with_another_body_is_422() {
    let addr = serve(Provider::new()).await;
    assert_eq!(
        capture(addr, Some("k"), 1, 100).await.status,
        StatusCode::CREATED
    );
    for (order_id, amount) in [(1, 101), (2, 100)] {
        let reused = capture(addr, Some("k"), order_id, amount).await;
        assert_eq!(reused.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(is_problem(&reused));
    }
    assert_eq!(captures_at(addr, 1).await.unwrap().captures, 1);
    assert_eq!(captures_at(addr, 2).await.unwrap().captures, 0);
}

#[tokio::test]
async fn a_missing_or_invalid_key_is_400() {
    let addr = serve(Provider::new()).await;
    let missing = capture(addr, None, 1, 100).await;
    assert_eq!(missing.status, StatusCode::BAD_REQUEST);
    assert!(is_problem(&missing));

    let too_long = "k".repeat(256);
    for key in ["", "two words", too_long.as_str()] {
        let invalid = capture(addr, Some(key), 1, 100).await;
        assert_eq!(invalid.status, StatusCode::BAD_REQUEST, "key {key:?}");
        assert!(is_problem(&invalid));
    }
    let not_ascii = Request::builder()
        .method(Method::POST)
        .uri("/captures")
        .header("content-type", "application/json")
        .header("idempotency-key", &b"caf\xe9"[..])
        .body(Full::new(Bytes::from_static(
            br#"{"order_id":1,"amount":100}"#,
        )))
        .unwrap();
    let invalid = send_once(addr, not_ascii).await.unwrap();
    assert_eq!(invalid.status, StatusCode::BAD_REQUEST);

    let no_json = send_once(
        addr,
        Request::builder()
            .method(Method::POST)
            .uri("/captures")
            .header("content-type", "application/json")
            .header("idempotency-key", "k-json")
            .body(Full::new(Bytes::from_static(b"{")))
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(no_json.status, StatusCode::BAD_REQUEST);
    assert!(is_problem(&no_json));

    let no_order = send_once(
        addr,
        axum_payments::client::get("/captures?order_id=x").unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(no_order.status, StatusCode::BAD_REQUEST);
    assert_eq!(captures_at(addr, 1).await.unwrap().captures, 0);
}

#[tokio::test]
async fn the_declined_order_is_402_replayed() {
    let addr = serve(Provider::new().declining(9)).await;
    let declined = capture(addr, Some("d"), 9, 100).await;
    assert_eq!(declined.status, StatusCode::PAYMENT_REQUIRED);
    assert!(is_problem(&declined));
    assert!(!declined.is_replay());
    let again = capture(addr, Some("d"), 9, 100).await;
    assert_eq!(again.status, StatusCode::PAYMENT_REQUIRED);
    assert!(again.is_replay());
    assert_eq!(again.body, declined.body);
    assert_eq!(captures_at(addr, 9).await.unwrap().captures, 0);
    // Other orders capture.
    assert_eq!(
        capture(addr, Some("e"), 10, 100).await.status,
        StatusCode::CREATED
    );
}

/// Concurrent duplicates of one key: one capture.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_duplicates_capture_once() {
    let addr = serve(Provider::new()).await;
    let tasks: Vec<_> = (0..32)
        .map(|_| tokio::spawn(async move { capture(addr, Some("storm"), 3, 500).await }))
        .collect();
    let mut bodies = Vec::new();
    for task in tasks {
        let reply = task.await.unwrap();
        assert_eq!(reply.status, StatusCode::CREATED);
        bodies.push(reply.body);
    }
    assert!(bodies.iter().all(|body| *body == bodies[0]));
    assert_eq!(captures_at(addr, 3).await.unwrap().captures, 1);
}

/// The binary: `PROVIDER_ADDR`, `listening <addr>`, `PROVIDER_DECLINE_ORDER`.
#[tokio::test]
async fn the_binary_serves_the_same() {
    let provider =
        hardening_support::Provider::start(&[("PROVIDER_DECLINE_ORDER", "5".to_owned())]);
    let first = capture(provider.addr, Some("bin"), 4, 700).await;
    assert_eq!(first.status, StatusCode::CREATED);
    let again = capture(provider.addr, Some("bin"), 4, 700).await;
    assert!(again.is_replay());
    assert_eq!(again.body, first.body);
    assert_eq!(provider.captures(4).await.captures, 1);
    assert_eq!(
        capture(provider.addr, Some("declined"), 5, 700)
            .await
            .status,
        StatusCode::PAYMENT_REQUIRED,
        "{}",
        provider.stderr_text()
    );
}
