//! The same axum router in process, with and without the idempotency layer: new keys (one claim
//! plus one complete each) and replays (one claim each). Prints the overhead ratios, then lets
//! criterion measure each case.
//!
//! `cargo bench -p idempotency-tower --bench layer`
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::routing::post;
use criterion::{Criterion, criterion_group, criterion_main};
use http_body_util::BodyExt;
use idempotency_core::MemoryStore;
use idempotency_tower::IdempotencyLayer;
use tower::ServiceExt;

const BODY: &str =
    r#"{"order_id":"o-1","amount":1250,"currency":"EUR","items":[{"sku":"a","qty":2}]}"#;

fn router() -> Router {
    Router::new().route(
        "/orders",
        post(|body: axum::body::Bytes| async move {
            (axum::http::StatusCode::CREATED, [("x-order", "1")], body)
        }),
    )
}

fn request(key: &str) -> http::Request<Body> {
    http::Request::post("/orders")
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(Body::from(BODY))
        .unwrap()
}

async fn call(app: &Router, key: &str) {
    let response = app.clone().oneshot(request(key)).await.unwrap();
    assert!(response.status().is_success());
    response.into_body().collect().await.unwrap();
}

static NEXT: AtomicU64 = AtomicU64::new(0);

fn fresh_key() -> String {
    format!("bench-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Runs `n` sequential requests inside a task on the runtime's worker, as a server runs its
/// connections (spawned tasks from the layer then stay on that worker), and returns the time.
fn run(runtime: &tokio::runtime::Runtime, app: &Router, new_keys: bool, n: u64) -> Duration {
    let app = app.clone();
    runtime
        .block_on(runtime.spawn(async move {
            let start = Instant::now();
            for _ in 0..n {
                let key = if new_keys {
                    fresh_key()
                } else {
                    "replayed".to_owned()
                };
                call(&app, &key).await;
            }
            start.elapsed()
        }))
        .unwrap()
}

fn layer_overhead(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let plain = router();
    let guarded = router().layer(IdempotencyLayer::new(MemoryStore::new()));
    runtime.block_on(call(&guarded, "replayed"));

    let n = 20_000;
    run(&runtime, &plain, true, n / 10);
    run(&runtime, &guarded, true, n / 10);
    let base = run(&runtime, &plain, true, n) / n as u32;
    let new_keys = run(&runtime, &guarded, true, n) / n as u32;
    let replays = run(&runtime, &guarded, false, n) / n as u32;
    println!(
        "layer overhead: without {base:?}/req, new keys {new_keys:?}/req ({:.2}x), replays {replays:?}/req ({:.2}x)",
        new_keys.as_secs_f64() / base.as_secs_f64(),
        replays.as_secs_f64() / base.as_secs_f64(),
    );

    let mut group = c.benchmark_group("axum_router");
    group.bench_function("without_layer", |b| {
        b.iter_custom(|iters| run(&runtime, &plain, true, iters))
    });
    group.bench_function("layer_new_keys", |b| {
        b.iter_custom(|iters| run(&runtime, &guarded, true, iters))
    });
    group.bench_function("layer_replays", |b| {
        b.iter_custom(|iters| run(&runtime, &guarded, false, iters))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    targets = layer_overhead
}
criterion_main!(benches);
