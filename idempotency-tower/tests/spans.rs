//! The layer's `idempotency.guard` span (`idempotency_core::telemetry`), as a real `tracing`
//! subscriber sees it: one per guarded request, with the OpenTelemetry HTTP attributes, the
//! key as its hash, the decision, the owner's attempt and fencing token, how the work ended;
//! never the raw key.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use axum::Router;
use axum::body::Body;
use axum::routing::post;
use http_body_util::BodyExt;
use idempotency_core::{Mechanism, MemoryStore, Scope, telemetry};
use idempotency_test::captured;
use idempotency_tower::IdempotencyLayer;
use tower::ServiceExt;

const RAW: &str = "raw-order-key-5521";

fn order(key: &str, body: &'static str) -> http::Request<Body> {
    http::Request::post("/orders")
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(Body::from(body))
        .unwrap()
}

async fn status(app: &Router, request: http::Request<Body>) -> u16 {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    response.into_body().collect().await.unwrap();
    status
}

#[test]
fn each_guarded_request_runs_in_one_span_with_the_documented_attributes() {
    let (statuses, capture) = captured(async {
        let app = Router::new()
            .route(
                "/orders",
                post(|body: axum::body::Bytes| async move {
                    if body.starts_with(b"fail") {
                        (http::StatusCode::INTERNAL_SERVER_ERROR, body)
                    } else {
                        (http::StatusCode::CREATED, body)
                    }
                }),
            )
            .layer(
                IdempotencyLayer::builder(MemoryStore::new())
                    .shared_scope()
                    .namespace("orders")
                    .build(),
            );
        vec![
            status(&app, order(RAW, "one")).await,
            status(&app, order(RAW, "one")).await,
            status(&app, order(RAW, "two")).await,
            status(&app, order("other-key", "fail")).await,
        ]
    });
    assert_eq!(statuses, [201, 201, 422, 500]);
    let spans = capture.named(telemetry::GUARD_SPAN);
    assert_eq!(spans.len(), 4, "{spans:?}");
    let key_hash = Scope::new("orders")
        .storage_key_for(Mechanism::Request, RAW)
        .to_hex();
    for span in &spans {
        assert_eq!(span.target, telemetry::TARGET);
        assert_eq!(span.field(telemetry::NAMESPACE), Some("orders"));
        assert_eq!(span.field(telemetry::HTTP_METHOD), Some("POST"));
        assert_eq!(span.field(telemetry::URL_PATH), Some("/orders"));
    }
    let seen: Vec<_> = spans
        .iter()
        .map(|span| {
            (
                span.field(telemetry::DECISION),
                span.field(telemetry::ATTEMPT),
                span.field(telemetry::FINISH),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (Some("execute"), Some("1"), Some("completed")),
            (Some("replay"), None, None),
            (Some("mismatch"), None, None),
            (Some("execute"), Some("1"), Some("released")),
        ]
    );
    for span in &spans[..3] {
        assert_eq!(span.field(telemetry::KEY_HASH), Some(key_hash.as_str()));
    }
    assert!(spans[0].field(telemetry::FENCING_TOKEN).is_some());
    let text = capture.text();
    assert!(!text.contains(RAW), "the raw key appears: {text}");
}

/// The transactional layer's requests run in the same span, with the decision taken in the
/// request's own transaction (SQLite, a file per test).
#[cfg(all(feature = "sqlite", feature = "axum"))]
#[test]
fn a_transactional_request_records_its_decision_and_finish() {
    use idempotency_sql::SqliteStore;
    use idempotency_tower::transactional::Tx;

    async fn grant(_tx: Tx<sqlx::Sqlite>, body: axum::body::Bytes) -> (http::StatusCode, String) {
        (http::StatusCode::CREATED, format!("granted {}", body.len()))
    }

    let file = std::env::temp_dir().join(format!(
        "idempotency-spans-{}.db",
        &idempotency_test::unique_key().to_hex()[..12]
    ));
    let (statuses, capture) = captured(async {
        let url = format!("sqlite://{}?mode=rwc", file.display());
        let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
        let store = SqliteStore::new(pool);
        store.migrate().await.unwrap();
        let app = Router::new().route("/orders", post(grant)).layer(
            IdempotencyLayer::builder(store)
                .shared_scope()
                .namespace("orders")
                .build_transactional(),
        );
        vec![
            status(&app, order(RAW, "one")).await,
            status(&app, order(RAW, "one")).await,
        ]
    });
    let _ = std::fs::remove_file(&file);
    assert_eq!(statuses, [201, 201]);
    let spans = capture.named(telemetry::GUARD_SPAN);
    let seen: Vec<_> = spans
        .iter()
        .map(|span| {
            (
                span.field(telemetry::DECISION),
                span.field(telemetry::FINISH),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [(Some("execute"), Some("completed")), (Some("replay"), None)]
    );
    let key_hash = Scope::new("orders")
        .storage_key_for(Mechanism::Request, RAW)
        .to_hex();
    assert_eq!(spans[0].field(telemetry::KEY_HASH), Some(key_hash.as_str()));
    assert!(!capture.text().contains(RAW), "{}", capture.text());
}
