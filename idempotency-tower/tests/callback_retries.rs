//! The README's callback recipe (`.callback("/trade_no")`) against a gateway's real retry
//! habits, on the memory store and Redis (`REDIS_URL`, default `redis://127.0.0.1:6379`): a
//! retry re-signed, re-timed, re-ordered and re-spaced is a duplicate and gets the stored
//! success; a conflicting notification (another amount) gets the stored success too, logged at
//! WARN and counted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::routing::post;
use bytes::Bytes;
use common::{read, unique};
use idempotency_core::MemoryStore;
use idempotency_core::{Store, metrics::CONFLICTS};
use idempotency_redis::RedisStore;
use idempotency_test::unavailable;
use idempotency_tower::IdempotencyLayer;
use tower::ServiceExt;

/// The merchant's notification handler: counts its runs and answers `success n`.
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

/// The gateway's first notice and its retry: new `notify_time`, new `sign`, other field order,
/// other spacing.
fn first_and_retry(trade: &str) -> (String, String) {
    (
        format!(
            r#"{{"trade_no":"{trade}","trade_status":"TRADE_SUCCESS","total_amount":"9.90","notify_time":"2026-12-04 10:00:00","sign":"c2lnbi0x"}}"#
        ),
        format!(
            r#"{{ "sign" : "c2lnbi0y", "total_amount": "9.90",
                 "notify_time": "2026-12-04 10:04:00", "trade_status": "TRADE_SUCCESS", "trade_no": "{trade}" }}"#
        ),
    )
}

async fn resigned_retry_is_a_duplicate<S: Store>(store: S) {
    let runs = Arc::new(AtomicUsize::new(0));
    let app = notify_app(
        IdempotencyLayer::builder(store)
            .namespace(unique("callbacks"))
            .callback("/trade_no")
            .shared_scope()
            .build(),
        Arc::clone(&runs),
    );
    let trade = unique("T");
    let (first, retry) = first_and_retry(&trade);
    let (status, headers, body) =
        read(app.clone().oneshot(notification(first)).await.unwrap()).await;
    assert_eq!(status, 200);
    assert!(!headers.contains_key("idempotent-replayed"));
    let (status, headers, again) =
        read(app.clone().oneshot(notification(retry)).await.unwrap()).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&again));
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(again, body);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_resigned_retry_is_a_duplicate_on_the_memory_store() {
    resigned_retry_is_a_duplicate(MemoryStore::new()).await;
}

#[tokio::test]
async fn a_resigned_retry_is_a_duplicate_on_redis() {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    match RedisStore::connect(&url).await {
        Ok(store) => {
            let store = store.with_key_prefix(format!("{}:", unique("test:tower:callback")));
            resigned_retry_is_a_duplicate(store).await;
        }
        Err(error) => unavailable::<()>("Redis", error).unwrap_or_default(),
    }
}

/// Log lines written by the `fmt` subscriber, kept for the test to read.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_conflicting_notification_gets_the_stored_success_logged_and_counted() {
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    tracing::subscriber::with_default(subscriber, || {
        metrics::with_local_recorder(&recorder, || {
            runtime.block_on(async {
                let app = notify_app(
                    IdempotencyLayer::builder(MemoryStore::new())
                        .namespace("callbacks.conflict")
                        .callback("/trade_no")
                        .shared_scope()
                        .build(),
                    Arc::clone(&runs),
                );
                let trade = unique("T");
                let (first, _) = first_and_retry(&trade);
                let (_, _, body) = read(
                    app.clone()
                        .oneshot(notification(first.clone()))
                        .await
                        .unwrap(),
                )
                .await;
                let conflicting = first.replace(r#""9.90""#, r#""19.90""#);
                assert_ne!(conflicting, first);
                let (status, headers, again) = read(
                    app.clone()
                        .oneshot(notification(conflicting))
                        .await
                        .unwrap(),
                )
                .await;
                assert_eq!(status, 200, "{}", String::from_utf8_lossy(&again));
                assert_eq!(headers["idempotent-replayed"], "true");
                assert_eq!(again, body, "the stored success");
            })
        })
    });
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the conflict ran nothing");
    let counted: u64 = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == CONFLICTS)
        .map(|(.., value)| match value {
            metrics_util::debugging::DebugValue::Counter(n) => n,
            _ => 0,
        })
        .sum();
    assert_eq!(counted, 1);
    let logged = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let warning = logged
        .lines()
        .find(|line| line.contains("WARN") && line.contains("another payload"))
        .unwrap_or_else(|| panic!("no WARN for the conflict in: {logged}"));
    assert!(
        warning.contains("namespace=\"callbacks.conflict\""),
        "{warning}"
    );
    assert!(warning.contains("record="), "{warning}");
}
