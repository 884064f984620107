//! A slow request body holds no transaction: the transactional layer reads the body before it
//! opens one, within the read timeout, even where neither the key nor the fingerprint needs it.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::StatusCode;
use bytes::Bytes;
use http_body::Frame;

use super::{Counters, Harness, app, send, trade};

/// A body that sends its first bytes and then nothing more.
struct Stalled(Option<Bytes>);

impl http_body::Body for Stalled {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.0.take() {
            Some(first) => Poll::Ready(Some(Ok(Frame::data(first)))),
            None => Poll::Pending,
        }
    }
}

fn grant_request(key: &str, body: Body) -> http::Request<Body> {
    http::Request::post("/grant")
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(body)
        .unwrap()
}

pub async fn slow_bodies_hold_no_transaction<H: Harness>(harness: &H) {
    let counters = Arc::new(Counters::default());
    let app = app(harness, harness.store(), &counters, |builder| {
        builder
            .fingerprint_headers([http::header::CONTENT_TYPE])
            .body_read_timeout(Duration::from_millis(200))
    });
    let trade_no = trade();
    let whole = serde_json::json!({ "trade_no": trade_no, "mode": "ok", "ms": 0 }).to_string();
    let first = Bytes::copy_from_slice(&whole.as_bytes()[..5]);
    let (status, headers, body) = send(
        &app,
        grant_request(&trade_no, Body::new(Stalled(Some(first)))),
    )
    .await;
    assert_eq!(status, StatusCode::REQUEST_TIMEOUT, "{body:?}");
    assert_eq!(headers["content-type"], "application/problem+json");
    assert_eq!(counters.runs.load(Ordering::SeqCst), 0);
    // Nothing was claimed: the whole request with the same key runs at once.
    let (status, _, body) = send(&app, grant_request(&trade_no, Body::from(whole))).await;
    assert_eq!(status, StatusCode::OK, "{body:?}");
    assert_eq!(harness.grants(&trade_no).await, 1);
}
