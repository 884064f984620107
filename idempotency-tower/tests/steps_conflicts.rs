//! The steps layer against a key reused with another payload: 422, the record marked (as the
//! other layers mark it), and the run's own payload still replayed. On SQLite: no server.
#![cfg(all(feature = "steps", feature = "sqlite", feature = "axum"))]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use axum::Router;
use axum::body::{Body, Bytes};
use axum::routing::post;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use idempotency_sql::SqliteStore;
use idempotency_steps::StepError;
use idempotency_tower::IdempotencyLayer;
use idempotency_tower::steps::Steps;
use tower::ServiceExt;

async fn checkout(mut run: Steps<SqliteStore>, body: Bytes) -> (StatusCode, String) {
    let captured = run
        .foreign("capture", async |key| Ok(format!("{key}:{}", body.len())))
        .await;
    match captured {
        Ok(capture) => (StatusCode::CREATED, capture),
        Err(StepError::End(answer)) => (StatusCode::PAYMENT_REQUIRED, answer.to_string()),
        Err(error) => (StatusCode::SERVICE_UNAVAILABLE, error.to_string()),
    }
}

async fn send(app: &Router, key: &str, body: &'static str) -> (StatusCode, Bytes) {
    let request = Request::post("/checkout")
        .header("idempotency-key", key)
        .body(Body::from(body))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    (
        status,
        response.into_body().collect().await.unwrap().to_bytes(),
    )
}

#[tokio::test]
async fn another_payload_is_refused_and_marked() {
    let file = std::env::temp_dir().join(format!(
        "idempotency-steps-conflicts-{}.db",
        &idempotency_test::unique_key().to_hex()[..12]
    ));
    let url = format!("sqlite://{}?mode=rwc", file.display());
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    let store = SqliteStore::new(pool);
    store.migrate().await.unwrap();
    let layer = IdempotencyLayer::builder(store.clone())
        .shared_scope()
        .namespace("checkout")
        .build_steps();
    let app = Router::new()
        .route("/checkout", post(checkout))
        .layer(layer);

    let (first, answer) = send(&app, "K1", r#"{"order_id":1}"#).await;
    assert_eq!(first, StatusCode::CREATED);
    let (other, problem) = send(&app, "K1", r#"{"order_id":2}"#).await;
    assert_eq!(other, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        String::from_utf8_lossy(&problem).contains("different request"),
        "a problem that says why: {problem:?}"
    );
    let (again, replayed) = send(&app, "K1", r#"{"order_id":1}"#).await;
    assert_eq!((again, replayed), (StatusCode::CREATED, answer));

    let (records, conflicts): (i64, i64) =
        sqlx::query_as("SELECT COUNT(*), SUM(conflicts) FROM idempotency_records")
            .fetch_one(store.pool())
            .await
            .unwrap();
    assert_eq!(
        (records, conflicts),
        (1, 1),
        "the mismatch is marked on the record"
    );
    let _ = std::fs::remove_file(&file);
}
