//! What the layer benches share: the order request and one call through a router.

use axum::Router;
use axum::body::Body;
use http_body_util::BodyExt;
use tower::ServiceExt;

/// The body of every order.
pub(crate) const BODY: &str =
    r#"{"order_id":"o-1","amount":1250,"currency":"EUR","items":[{"sku":"a","qty":2}]}"#;

/// `POST /orders` with `key` as its `Idempotency-Key`.
pub(crate) fn order(key: &str) -> http::Request<Body> {
    http::Request::post("/orders")
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(Body::from(BODY))
        .unwrap()
}

/// One request through `app`, its response body read to the end.
pub(crate) async fn call(app: &Router, request: http::Request<Body>) {
    let response = app.clone().oneshot(request).await.unwrap();
    assert!(response.status().is_success());
    response.into_body().collect().await.unwrap();
}
