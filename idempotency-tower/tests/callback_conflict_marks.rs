//! A conflicting notification (another amount for the same trade, re-signed) leaves a mark on
//! the record it met, which reconciliation lists (`Admin::list` with `min_conflicts`, what
//! `idempotency conflicts` runs), on Redis (`REDIS_URL`, default `redis://127.0.0.1:6379`) and
//! PostgreSQL (`DATABASE_URL`, default `postgres://postgres@127.0.0.1:5432/test`): answered
//! with the stored success by default, refused with the `Reject` setting, marked either way;
//! a plain re-signed retry marks nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::SystemTime;

use axum::Router;
use axum::body::Body;
use axum::routing::post;
use bytes::Bytes;
use common::{read, unique};
use idempotency_core::{Record, Store};
use idempotency_operations::{Admin, Operations, Query, RecordView, TracingAudit};
use idempotency_redis::RedisStore;
use idempotency_test::unavailable;
use idempotency_tower::{ConflictAnswer, IdempotencyLayer};
use tower::ServiceExt;

fn notify_app<S: Store>(layer: IdempotencyLayer<S>, runs: Arc<AtomicUsize>) -> Router {
    Router::new()
        .route(
            "/notify",
            post(move |_body: Bytes| {
                let runs = Arc::clone(&runs);
                async move { format!("success {}", runs.fetch_add(1, Ordering::SeqCst) + 1) }
            }),
        )
        .layer(layer)
}

fn notification(body: String) -> http::Request<Body> {
    http::Request::post("/notify")
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap()
}

/// The gateway's notice of `trade` for `amount`, signed `sign`.
fn notice(trade: &str, amount: &str, sign: &str) -> String {
    format!(
        r#"{{"trade_no":"{trade}","trade_status":"TRADE_SUCCESS","total_amount":"{amount}","notify_time":"2026-12-04 10:00:00","sign":"{sign}"}}"#
    )
}

/// The records of `namespace` that met a conflicting duplicate, as reconciliation lists them.
async fn conflicted<S: Store + Operations + Clone>(store: &S, namespace: &str) -> Vec<Record> {
    let admin = Admin::new(store.clone(), TracingAudit);
    let query = Query::all().namespace(namespace).min_conflicts(1);
    admin.list(&query, 100, &mut |_| {}).await.unwrap()
}

async fn conflicting_notifications_are_marked<S: Store + Operations + Clone>(store: S) {
    for answer in [ConflictAnswer::ReplayStored, ConflictAnswer::Reject] {
        let namespace = unique("callbacks.marks");
        let runs = Arc::new(AtomicUsize::new(0));
        let app = notify_app(
            IdempotencyLayer::builder(store.clone())
                .namespace(namespace.clone())
                .callback("/trade_no")
                .on_conflict(answer)
                .shared_scope()
                .build(),
            Arc::clone(&runs),
        );
        let trade = unique("T");
        let (status, _, first) = read(
            app.clone()
                .oneshot(notification(notice(&trade, "9.90", "c2lnbi0x")))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200);
        // A retry re-signed is a plain duplicate: nothing to reconcile.
        let (status, _, again) = read(
            app.clone()
                .oneshot(notification(notice(&trade, "9.90", "c2lnbi0y")))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!((status, &again), (http::StatusCode::OK, &first));
        assert!(conflicted(&store, &namespace).await.is_empty());

        let before = SystemTime::now() - std::time::Duration::from_secs(5);
        let (status, headers, answered) = read(
            app.clone()
                .oneshot(notification(notice(&trade, "19.90", "c2lnbi0z")))
                .await
                .unwrap(),
        )
        .await;
        match answer {
            ConflictAnswer::Reject => assert_eq!(status, 422, "{answer:?}"),
            _ => {
                assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answered));
                assert_eq!(headers["idempotent-replayed"], "true");
                assert_eq!(answered, first, "the stored success");
            }
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1, "the conflict ran nothing");

        let listed = conflicted(&store, &namespace).await;
        assert_eq!(
            listed.len(),
            1,
            "{answer:?}: the conflicted record is listed"
        );
        let record = &listed[0];
        assert_eq!(record.conflicts, 1);
        assert!(record.last_conflict_at.is_some_and(|at| at >= before));
        assert_eq!(record.outcome.as_ref().map(|o| o.status), Some(200));
        let view = serde_json::to_value(RecordView::of(record, SystemTime::now())).unwrap();
        assert_eq!(view["conflicts"], 1);
        assert!(view["last_conflict_at_ms"].is_u64(), "{view}");

        // The conflict's answer is unchanged by the mark: the next one is marked too.
        let (status, _, _) = read(
            app.clone()
                .oneshot(notification(notice(&trade, "29.90", "c2lnbi0w")))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status == 200, answer == ConflictAnswer::ReplayStored);
        assert_eq!(conflicted(&store, &namespace).await[0].conflicts, 2);
    }
}

#[tokio::test]
async fn a_conflicting_notification_is_marked_on_redis() {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    match RedisStore::connect(&url).await {
        Ok(store) => {
            let store = store.with_key_prefix(format!("{}:", unique("test:tower:marks")));
            conflicting_notifications_are_marked(store).await;
        }
        Err(error) => unavailable::<()>("Redis", error).unwrap_or_default(),
    }
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn a_conflicting_notification_is_marked_on_postgres() {
    common::on_postgres("idem_marks", conflicting_notifications_are_marked).await;
}
