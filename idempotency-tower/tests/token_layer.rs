//! The one-time token layer through an axum router, with the memory and the Redis token
//! stores: one submit per token reaches the handler, every other one is refused with 409
//! problem+json.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::{get, post};
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use idempotency_core::Scope;
use idempotency_redis::RedisTokenStore;
use idempotency_test::unavailable;
use idempotency_token::{DEFAULT_TOKEN_TTL, MemoryTokenStore, TokenStore};
use idempotency_tower::{IDEMPOTENCY_TOKEN, TokenLayer};
use tower::ServiceExt;

const USER: &str = "x-user-id";

/// A checkout form: GET renders (issues a token), POST orders (counted).
fn app<T: TokenStore>(tokens: Arc<T>, orders: Arc<AtomicUsize>) -> Router {
    let issuer = Arc::clone(&tokens);
    Router::new()
        .route(
            "/checkout",
            post(move || {
                let orders = Arc::clone(&orders);
                async move {
                    orders.fetch_add(1, Ordering::SeqCst);
                    (StatusCode::CREATED, "ordered")
                }
            })
            .get(move |headers: http::HeaderMap| {
                let issuer = Arc::clone(&issuer);
                async move {
                    let user = headers[USER].to_str().unwrap().to_owned();
                    let scope = Scope::new("checkout").with_principal(user);
                    issuer.issue(&scope, DEFAULT_TOKEN_TTL).await.unwrap().value
                }
            }),
        )
        .route("/health", get(|| async { "ok" }))
        .layer(TokenLayer::new(tokens, "checkout").principal(|parts| {
            parts
                .headers
                .get(USER)
                .map(|value| value.to_str().unwrap_or_default().to_owned())
        }))
}

async fn render_form(app: &Router, user: &str) -> String {
    let response = app
        .clone()
        .oneshot(
            Request::get("/checkout")
                .header(USER, user)
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK, "GET passes through");
    let body = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(body.to_vec()).unwrap()
}

fn submit(user: &str, token: Option<&str>) -> Request<Body> {
    let mut request = Request::post("/checkout").header(USER, user);
    if let Some(token) = token {
        request = request.header(IDEMPOTENCY_TOKEN, token);
    }
    request.body(Body::from("item=42")).unwrap()
}

async fn assert_rejected(response: http::Response<Body>) {
    assert_eq!(response.status(), StatusCode::CONFLICT);
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(problem["status"], 409);
    assert_eq!(problem["type"], "urn:idempotency:token-rejected");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("missing, unknown, expired or already used"),
        "{problem}"
    );
}

/// The whole behaviour, for any token store.
async fn double_submits_are_refused<T: TokenStore>(tokens: Arc<T>) {
    let orders = Arc::new(AtomicUsize::new(0));
    let app = app(tokens, Arc::clone(&orders));
    let user = format!("user-{}", idempotency_test::unique_key().to_hex());

    // Without a token, the handler never runs.
    assert_rejected(app.clone().oneshot(submit(&user, None)).await.unwrap()).await;
    assert_rejected(
        app.clone()
            .oneshot(submit(&user, Some("never-issued")))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(orders.load(Ordering::SeqCst), 0);

    // One token, one order; the resubmit is refused.
    let token = render_form(&app, &user).await;
    let first = app
        .clone()
        .oneshot(submit(&user, Some(&token)))
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    assert_rejected(
        app.clone()
            .oneshot(submit(&user, Some(&token)))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(orders.load(Ordering::SeqCst), 1);

    // A token rendered for one user is refused for another.
    let token = render_form(&app, &user).await;
    assert_rejected(
        app.clone()
            .oneshot(submit("someone-else", Some(&token)))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(orders.load(Ordering::SeqCst), 1);

    // 50 simultaneous submits of one token (a frantic double click): exactly one order.
    let token = render_form(&app, &user).await;
    let submits: Vec<_> = (0..50)
        .map(|_| {
            let (app, user, token) = (app.clone(), user.clone(), token.clone());
            tokio::spawn(async move { app.oneshot(submit(&user, Some(&token))).await.unwrap() })
        })
        .collect();
    let mut created = 0;
    for submit in submits {
        let response = submit.await.unwrap();
        if response.status() == StatusCode::CREATED {
            created += 1;
        } else {
            assert_rejected(response).await;
        }
    }
    assert_eq!(created, 1);
    assert_eq!(orders.load(Ordering::SeqCst), 2);

    // Unguarded methods pass through untouched.
    let health = app
        .oneshot(Request::get("/health").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(health.status(), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_tokens_refuse_double_submits() {
    double_submits_are_refused(Arc::new(MemoryTokenStore::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_tokens_refuse_double_submits() {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let tokens = match RedisTokenStore::connect(&url).await {
        Ok(tokens) => tokens.with_key_prefix("test:tower:token:"),
        Err(error) => return unavailable::<()>("Redis", error).unwrap_or(()),
    };
    double_submits_are_refused(Arc::new(tokens)).await;
}

#[tokio::test]
async fn expired_tokens_are_refused() {
    let tokens = Arc::new(MemoryTokenStore::new());
    let orders = Arc::new(AtomicUsize::new(0));
    let app = app(Arc::clone(&tokens), Arc::clone(&orders));
    let scope = Scope::new("checkout").with_principal("u1");
    let token = tokens
        .issue(&scope, Duration::from_millis(50))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_rejected(app.oneshot(submit("u1", Some(&token.value))).await.unwrap()).await;
    assert_eq!(orders.load(Ordering::SeqCst), 0);
}

/// Plain HTML forms cannot set headers: the token may come in a hidden form field, or a JSON
/// field; the handler still receives the body unchanged.
#[tokio::test]
async fn tokens_in_form_and_json_fields() {
    let tokens = Arc::new(MemoryTokenStore::new());
    let orders = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&orders);
    let app = Router::new()
        .route(
            "/checkout",
            post(move |body: axum::body::Bytes| {
                let counter = Arc::clone(&counter);
                async move {
                    counter.fetch_add(1, Ordering::SeqCst);
                    (StatusCode::CREATED, body)
                }
            }),
        )
        .layer(
            TokenLayer::new(Arc::clone(&tokens), "checkout")
                .form_field("_token")
                .json_field("/meta/token")
                .max_body_bytes(1024),
        );
    let scope = Scope::new("checkout");
    let post_as = |content_type: &str, body: String| {
        Request::post("/checkout")
            .header("content-type", content_type)
            .body(Body::from(body))
            .unwrap()
    };

    let token = tokens.issue(&scope, DEFAULT_TOKEN_TTL).await.unwrap().value;
    let form = format!("item=42&note=gift+wrap&_token={token}");
    let response = app
        .clone()
        .oneshot(post_as("application/x-www-form-urlencoded", form.clone()))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let echoed = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        echoed,
        form.as_bytes(),
        "the handler sees the body unchanged"
    );
    assert_rejected(
        app.clone()
            .oneshot(post_as("application/x-www-form-urlencoded", form))
            .await
            .unwrap(),
    )
    .await;

    let token = tokens.issue(&scope, DEFAULT_TOKEN_TTL).await.unwrap().value;
    let json = format!("{{\"item\":42,\"meta\":{{\"token\":\"{token}\"}}}}");
    let response = app
        .clone()
        .oneshot(post_as("application/json", json.clone()))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    assert_rejected(
        app.clone()
            .oneshot(post_as("application/json", json))
            .await
            .unwrap(),
    )
    .await;

    // A field of another content type is not looked at; an oversized body is refused with 413.
    let token = tokens.issue(&scope, DEFAULT_TOKEN_TTL).await.unwrap().value;
    assert_rejected(
        app.clone()
            .oneshot(post_as("text/plain", format!("_token={token}")))
            .await
            .unwrap(),
    )
    .await;
    let large = format!("_token={token}&pad={}", "x".repeat(2048));
    let response = app
        .oneshot(post_as("application/x-www-form-urlencoded", large))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(orders.load(Ordering::SeqCst), 2);
}
