//! The layer's presets, through a real axum router on the memory store: the callback preset
//! (key from a body field, 2xx only stored, a duplicate in flight waits) and verify-then-claim.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::Body;
use axum::http::StatusCode;
use common::{Calls, read, routes, unique};
use idempotency_core::MemoryStore;
use idempotency_tower::IdempotencyLayer;
use tower::ServiceExt;

fn callback(uri: &str, trade_no: &str) -> http::Request<Body> {
    http::Request::post(uri)
        .header("content-type", "application/json")
        .body(Body::from(format!(r#"{{"trade_no":"{trade_no}"}}"#)))
        .unwrap()
}

/// A callback answered 404 (the order not committed yet) or 400 is not stored: the gateway's
/// identical retry runs again. A 2xx is stored and replayed.
#[tokio::test]
async fn the_callback_preset_stores_only_success() {
    let calls = Arc::new(Calls::default());
    let app = routes(Arc::clone(&calls)).layer(
        IdempotencyLayer::builder(MemoryStore::new())
            .shared_scope()
            .namespace("callbacks")
            .callback("/trade_no")
            .build(),
    );
    for code in [404, 400, 409, 500] {
        let trade_no = unique("T");
        let uri = format!("/status?code={code}");
        for _ in 0..2 {
            let (status, headers, _) = read(
                app.clone()
                    .oneshot(callback(&uri, &trade_no))
                    .await
                    .unwrap(),
            )
            .await;
            assert_eq!(status.as_u16(), code);
            assert!(
                !headers.contains_key("idempotent-replayed"),
                "{code} is not stored"
            );
        }
    }
    assert_eq!(calls.status.load(Ordering::SeqCst), 8, "every retry ran");

    let trade_no = unique("T");
    let (status, _, body) = read(
        app.clone()
            .oneshot(callback("/status?code=200", &trade_no))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, headers, again) = read(
        app.clone()
            .oneshot(callback("/status?code=200", &trade_no))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(again, body);
    assert_eq!(calls.status.load(Ordering::SeqCst), 9);
}

/// A duplicate callback that arrives while the first runs waits for it and gets its answer:
/// the gateway sees 200 every time.
#[tokio::test]
async fn the_callback_preset_waits_for_the_first() {
    let calls = Arc::new(Calls::default());
    let app = routes(Arc::clone(&calls)).layer(
        IdempotencyLayer::builder(MemoryStore::new())
            .shared_scope()
            .callback("/trade_no")
            .build(),
    );
    let trade_no = unique("T");
    let first = tokio::spawn(app.clone().oneshot(callback("/slow?ms=300", &trade_no)));
    calls.slow_started.notified().await;
    let (status, headers, _) = read(
        app.clone()
            .oneshot(callback("/slow?ms=300", &trade_no))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(read(first.await.unwrap().unwrap()).await.0, StatusCode::OK);
    assert_eq!(calls.slow.load(Ordering::SeqCst), 1);
}

/// Verification runs before the claim: a forged callback carrying a real trade number gets
/// 401, runs nothing, takes nothing from the real one and reads nothing of its answer.
#[tokio::test]
async fn verification_runs_before_the_claim() {
    let calls = Arc::new(Calls::default());
    let app = routes(Arc::clone(&calls)).layer(
        IdempotencyLayer::builder(MemoryStore::new())
            .shared_scope()
            .callback("/trade_no")
            .verify(|parts, _body| match parts.headers.get("x-signature") {
                Some(value) if value == "good" => Ok(()),
                _ => Err("bad signature".to_owned()),
            })
            .build(),
    );
    let signed = |trade_no: &str| {
        let mut request = callback("/status?code=200", trade_no);
        request
            .headers_mut()
            .insert("x-signature", "good".parse().unwrap());
        request
    };
    let trade_no = unique("T");
    let (status, headers, _) = read(
        app.clone()
            .oneshot(callback("/status?code=200", &trade_no))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(headers["content-type"], "application/problem+json");
    let (status, headers, _) = read(app.clone().oneshot(signed(&trade_no)).await.unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        !headers.contains_key("idempotent-replayed"),
        "the real one ran first"
    );
    let (status, headers, _) = read(
        app.clone()
            .oneshot(callback("/status?code=200", &trade_no))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "no replay for a forged callback"
    );
    assert!(!headers.contains_key("idempotent-replayed"));
    assert_eq!(calls.status.load(Ordering::SeqCst), 1);
}
