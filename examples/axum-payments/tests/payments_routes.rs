//! The payments service, built for real and called in-process (tower `oneshot`), in both
//! compositions: the layers around the whole router (`app`, as served) and on their routes
//! (`app_per_route`). Every test runs against each.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::body::{Body, to_bytes};
use axum_payments::{AppState, CouponCount, HttpService, Order, OrderStatus, app, app_per_route};
use http::{Request, StatusCode, header};
use idempotency_core::{BoxStore, MemoryStore};
use serde_json::{Value, json};
use tower::ServiceExt;

fn store() -> BoxStore {
    BoxStore::new(MemoryStore::new())
}

/// Runs each named test against both compositions of the service.
macro_rules! in_both_compositions {
    ($($test:ident),+ $(,)?) => {
        mod around_the_router {
            $(#[tokio::test]
            async fn $test() {
                super::$test(super::app(super::AppState::in_memory(), super::store())).await;
            })+
        }
        mod per_route {
            $(#[tokio::test]
            async fn $test() {
                super::$test(super::app_per_route(super::AppState::in_memory(), super::store()))
                    .await;
            })+
        }
    };
}

struct Answer {
    status: StatusCode,
    headers: http::HeaderMap,
    body: Value,
}

impl Answer {
    fn replayed(&self) -> bool {
        self.headers
            .get("idempotent-replayed")
            .map(|v| v.as_bytes())
            == Some(b"true")
    }

    fn is_problem(&self) -> bool {
        self.headers.get(header::CONTENT_TYPE).map(|v| v.as_bytes())
            == Some(b"application/problem+json")
    }
}

async fn call<S: HttpService>(router: &S, request: Request<Body>) -> Answer {
    let response = router.clone().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let bytes = to_bytes(body, 1 << 20).await.unwrap();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into_owned()))
    };
    Answer {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

in_both_compositions!(
    the_four_routes,
    a_duplicate_callback_is_replayed_and_grants_nothing,
    a_second_trade_for_a_paid_order_is_an_idempotent_success_without_a_grant,
    paying_a_cancelled_order_is_an_illegal_transition,
    unknown_orders_are_404,
    creating_an_order_twice_with_one_key_replays_the_same_order,
    creating_an_order_without_a_key_is_400_problem_json,
    the_same_key_with_another_body_is_422,
    callers_never_share_an_order_key,
    a_callback_with_malformed_json_is_400,
    order_bodies_are_validated_as_problem_json,
);

fn post(path: &str, key: Option<&str>, body: impl Into<Body>) -> Request<Body> {
    post_as(Some("demo-client"), path, key, body)
}

/// `POST path` as the caller of bearer `token` (none: no `Authorization`).
fn post_as(
    token: Option<&str>,
    path: &str,
    key: Option<&str>,
    body: impl Into<Body>,
) -> Request<Body> {
    let mut builder = Request::post(path).header(header::CONTENT_TYPE, "application/json");
    if let Some(token) = token {
        builder = builder.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    if let Some(key) = key {
        builder = builder.header("idempotency-key", key);
    }
    builder.body(body.into()).unwrap()
}

fn get(path: &str) -> Request<Body> {
    Request::get(path).body(Body::empty()).unwrap()
}

async fn create<S: HttpService>(router: &S, key: &str, user_id: u64) -> Order {
    let body = json!({"user_id": user_id, "amount_cents": 1299}).to_string();
    let answer = call(router, post("/orders", Some(key), body)).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    serde_json::from_value(answer.body).unwrap()
}

async fn callback<S: HttpService>(router: &S, trade_no: &str, order_id: u64) -> Answer {
    let body = json!({"trade_no": trade_no, "order_id": order_id}).to_string();
    call(router, post("/payments/callback", None, body)).await
}

async fn coupons<S: HttpService>(router: &S, user_id: u64) -> u64 {
    let answer = call(router, get(&format!("/users/{user_id}/coupons"))).await;
    assert_eq!(answer.status, StatusCode::OK);
    let count: CouponCount = serde_json::from_value(answer.body).unwrap();
    assert_eq!(count.user_id, user_id);
    count.count
}

async fn the_four_routes<S: HttpService>(router: S) {
    let order = create(&router, "k-routes", 7).await;
    assert_eq!(order.user_id, 7);
    assert_eq!(order.amount_cents, 1299);
    assert_eq!(order.status, OrderStatus::WaitPay);

    let fetched = call(&router, get(&format!("/orders/{}", order.order_id))).await;
    assert_eq!(fetched.status, StatusCode::OK);
    assert_eq!(fetched.body["status"], "WAIT_PAY");
    assert_eq!(coupons(&router, 7).await, 0);

    let paid = callback(&router, "T-routes", order.order_id).await;
    assert_eq!(paid.status, StatusCode::OK, "{}", paid.body);
    assert_eq!(paid.body["order_id"], order.order_id);
    assert_eq!(paid.body["status"], "PAID");
    assert!(!paid.replayed());

    let fetched = call(&router, get(&format!("/orders/{}", order.order_id))).await;
    assert_eq!(fetched.body["status"], "PAID");
    assert_eq!(fetched.body["trade_no"], "T-routes");
    assert_eq!(coupons(&router, 7).await, 1);
}

async fn a_duplicate_callback_is_replayed_and_grants_nothing<S: HttpService>(router: S) {
    let order = create(&router, "k-dup", 7).await;
    let first = callback(&router, "T-dup", order.order_id).await;
    let second = callback(&router, "T-dup", order.order_id).await;
    assert_eq!(second.status, StatusCode::OK);
    assert!(second.replayed());
    assert_eq!(second.body, first.body);
    assert_eq!(coupons(&router, 7).await, 1);
}

async fn a_second_trade_for_a_paid_order_is_an_idempotent_success_without_a_grant<
    S: HttpService,
>(
    router: S,
) {
    let order = create(&router, "k-second-trade", 7).await;
    assert_eq!(
        callback(&router, "T-a", order.order_id).await.status,
        StatusCode::OK
    );
    // Another trade number: not a duplicate for the layer, so the state machine decides.
    let again = callback(&router, "T-b", order.order_id).await;
    assert_eq!(again.status, StatusCode::OK);
    assert!(!again.replayed());
    assert_eq!(again.body["status"], "PAID");
    assert_eq!(again.body["trade_no"], "T-a");
    assert_eq!(coupons(&router, 7).await, 1);
}

async fn paying_a_cancelled_order_is_an_illegal_transition<S: HttpService>(router: S) {
    let order = create(&router, "k-cancel", 9).await;
    let cancelled = call(
        &router,
        post(
            &format!("/orders/{}/cancel", order.order_id),
            None,
            Body::empty(),
        ),
    )
    .await;
    assert_eq!(cancelled.status, StatusCode::OK);
    assert_eq!(cancelled.body["status"], "CANCELLED");
    let refused = callback(&router, "T-cancel", order.order_id).await;
    assert_eq!(refused.status, StatusCode::CONFLICT);
    assert!(refused.is_problem());
    assert_eq!(refused.body["title"], "Illegal State Transition");
    assert_eq!(coupons(&router, 9).await, 0);
}

async fn unknown_orders_are_404<S: HttpService>(router: S) {
    let missing = callback(&router, "T-missing", 4242).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert!(missing.is_problem());
    let missing = call(&router, get("/orders/4242")).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert!(missing.is_problem());
}

async fn creating_an_order_twice_with_one_key_replays_the_same_order<S: HttpService>(router: S) {
    let body = json!({"user_id": 7, "amount_cents": 1299}).to_string();
    let first = call(&router, post("/orders", Some("k-replay"), body.clone())).await;
    let second = call(&router, post("/orders", Some("k-replay"), body.clone())).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert!(!first.replayed());
    assert_eq!(second.status, StatusCode::CREATED);
    assert!(second.replayed());
    assert_eq!(second.body["order_id"], first.body["order_id"]);
    // Another key is another order.
    let third = call(&router, post("/orders", Some("k-replay-2"), body)).await;
    assert_ne!(third.body["order_id"], first.body["order_id"]);
}

async fn creating_an_order_without_a_key_is_400_problem_json<S: HttpService>(router: S) {
    let body = json!({"user_id": 7, "amount_cents": 1299}).to_string();
    let answer = call(&router, post("/orders", None, body)).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert!(answer.is_problem());
    // Nothing was created: the first order made afterwards is order 1.
    assert_eq!(create(&router, "k-after", 7).await.order_id, 1);
}

async fn callers_never_share_an_order_key<S: HttpService>(router: S) {
    let body = json!({"user_id": 7, "amount_cents": 1299}).to_string();
    let alice = call(
        &router,
        post_as(Some("alice"), "/orders", Some("k-tenant"), body.clone()),
    )
    .await;
    assert_eq!(alice.status, StatusCode::CREATED);
    // Mallory sends Alice's key and body: an order of her own, not Alice's replayed.
    let mallory = call(
        &router,
        post_as(Some("mallory"), "/orders", Some("k-tenant"), body),
    )
    .await;
    assert_eq!(mallory.status, StatusCode::CREATED);
    assert!(!mallory.replayed());
    assert_ne!(mallory.body["order_id"], alice.body["order_id"]);
    // Nor does another body tell her the key exists (no 422).
    let other = json!({"user_id": 7, "amount_cents": 1}).to_string();
    let probe = call(
        &router,
        post_as(Some("eve"), "/orders", Some("k-tenant"), other),
    )
    .await;
    assert_eq!(probe.status, StatusCode::CREATED);
    // An order without a caller is refused, nothing claimed.
    let anonymous = json!({"user_id": 7, "amount_cents": 5}).to_string();
    let refused = call(&router, post_as(None, "/orders", Some("k-anon"), anonymous)).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert!(refused.is_problem());
}

async fn the_same_key_with_another_body_is_422<S: HttpService>(router: S) {
    create(&router, "k-mismatch", 7).await;
    let other = json!({"user_id": 7, "amount_cents": 1}).to_string();
    let answer = call(&router, post("/orders", Some("k-mismatch"), other)).await;
    assert_eq!(answer.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(answer.is_problem());
    // The record is untouched: the original body still replays.
    let original = json!({"user_id": 7, "amount_cents": 1299}).to_string();
    let again = call(&router, post("/orders", Some("k-mismatch"), original)).await;
    assert!(again.replayed());
}

async fn a_callback_with_malformed_json_is_400<S: HttpService>(router: S) {
    let answer = call(
        &router,
        post(
            "/payments/callback",
            None,
            r#"{"trade_no": "T1", "order_id": "#,
        ),
    )
    .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert!(answer.is_problem());
}

async fn order_bodies_are_validated_as_problem_json<S: HttpService>(router: S) {
    let malformed = call(&router, post("/orders", Some("k-bad-1"), "{not json")).await;
    assert_eq!(malformed.status, StatusCode::BAD_REQUEST);
    assert!(malformed.is_problem());
    let wrong_shape = call(
        &router,
        post("/orders", Some("k-bad-2"), r#"{"user_id": "seven"}"#),
    )
    .await;
    assert_eq!(wrong_shape.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(wrong_shape.is_problem());
    let bad_id = call(&router, get("/orders/not-a-number")).await;
    assert_eq!(bad_id.status, StatusCode::BAD_REQUEST);
    assert!(bad_id.is_problem());
}
