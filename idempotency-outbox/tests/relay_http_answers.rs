//! How the HTTP target reads a receiver's answers, against a real PostgreSQL outbox
//! (`DATABASE_URL`) and real HTTP endpoints on loopback: a business 409 is refused and counted
//! (only the idempotency layer's "in flight" 409 defers, see `relay_http.rs`), and an answer's
//! body is read only up to a bound, whatever the receiver sends.
#![cfg(all(feature = "postgres", feature = "http"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::routing::post;
use idempotency_outbox::Relay;
use idempotency_outbox::http::HttpTarget;
use idempotency_outbox::table::OutboxTable;
use support::{enqueue_committed, fresh_outbox, message};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A 409 that is the receiver's business answer (JSON, no `Retry-After`, not the layer's
/// problem) is refused and counted: with one attempt allowed the message is dead, its last
/// error quoting the receiver. Deferring it would retry it forever.
#[tokio::test]
async fn a_business_conflict_is_refused_and_counted() {
    let Some(outbox) = fresh_outbox().await else {
        return;
    };
    let app = Router::new().route(
        "/cancel",
        post(|| async {
            (
                StatusCode::CONFLICT,
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                r#"{"error":"order already shipped"}"#,
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let cancel = message("cancel-1", "/cancel");
    enqueue_committed(&outbox, std::slice::from_ref(&cancel)).await;
    let relay = Relay::new(outbox.clone(), HttpTarget::new(base)).with_max_attempts(1);
    let round = relay.deliver_due().await.unwrap();
    assert_eq!(
        (round.claimed, round.deferred, round.dead),
        (1, 0, 1),
        "{round:?}"
    );
    let dead = outbox.dead(10).await.unwrap();
    assert_eq!(dead[0].message.id, cancel.id);
    let error = dead[0].last_error.as_deref().unwrap_or("");
    assert!(error.contains("409"), "{error}");
    assert!(error.contains("order already shipped"), "{error}");
}

/// A receiver answers 200 announcing a 100 MB body, sends 1 MiB of it and then nothing more,
/// keeping the connection open: the target stops reading at its bound (64 KiB) and the message
/// is delivered, where reading to the end would hold the relay until its timeout and count
/// the message unreachable.
#[tokio::test]
async fn an_answer_body_is_read_only_up_to_the_bound() {
    let Some(outbox) = fresh_outbox().await else {
        return;
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = vec![0u8; 64 * 1024];
        let _ = socket.read(&mut request).await.unwrap();
        socket
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100000000\r\n\r\n")
            .await
            .unwrap();
        socket
            .write_all(&vec![b'x'; 1024 * 1024])
            .await
            .unwrap_or(());
        // Hold the connection open, sending nothing more, until the client closes it.
        let mut rest = [0u8; 1024];
        while socket.read(&mut rest).await.is_ok_and(|read| read > 0) {}
    });

    enqueue_committed(&outbox, &[message("flood-1", "/grants")]).await;
    let relay = Relay::new(
        outbox.clone(),
        HttpTarget::new(base).with_timeout(std::time::Duration::from_secs(5)),
    );
    let round = relay.deliver_due().await.unwrap();
    assert_eq!(
        (round.claimed, round.sent, round.unreachable),
        (1, 1, 0),
        "{round:?}"
    );
}
