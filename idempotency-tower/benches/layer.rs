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

/// Nanoseconds the calling thread has spent on a CPU (Linux `schedstat`); steadier than wall
/// time on a shared machine. `None` where unavailable.
fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Runs `n` sequential requests inside a task on the runtime's only worker, as a server runs its
/// connections (tasks the layer spawns stay on that worker), and returns the wall time and the
/// worker's CPU time.
fn run(
    runtime: &tokio::runtime::Runtime,
    app: &Router,
    new_keys: bool,
    n: u64,
) -> (Duration, Option<Duration>) {
    let app = app.clone();
    runtime
        .block_on(runtime.spawn(async move {
            let cpu = thread_cpu_ns();
            let start = Instant::now();
            for _ in 0..n {
                let key = if new_keys {
                    fresh_key()
                } else {
                    "replayed".to_owned()
                };
                call(&app, &key).await;
            }
            let cpu = cpu
                .zip(thread_cpu_ns())
                .map(|(before, after)| Duration::from_nanos(after.saturating_sub(before)));
            (start.elapsed(), cpu)
        }))
        .unwrap()
}

fn per_request((wall, cpu): (Duration, Option<Duration>), n: u64) -> (Duration, Duration) {
    let n = n as u32;
    (wall / n, cpu.unwrap_or(wall) / n)
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
    let base = per_request(run(&runtime, &plain, true, n), n);
    let new_keys = per_request(run(&runtime, &guarded, true, n), n);
    let replays = per_request(run(&runtime, &guarded, false, n), n);
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    println!(
        "layer overhead (wall): without {:?}/req, new keys {:?}/req ({:.2}x), replays {:?}/req ({:.2}x)",
        base.0,
        new_keys.0,
        ratio(new_keys.0, base.0),
        replays.0,
        ratio(replays.0, base.0),
    );
    println!(
        "layer overhead (worker CPU): without {:?}/req, new keys {:?}/req ({:.2}x, +{:?}), replays {:?}/req ({:.2}x, +{:?})",
        base.1,
        new_keys.1,
        ratio(new_keys.1, base.1),
        new_keys.1.saturating_sub(base.1),
        replays.1,
        ratio(replays.1, base.1),
        replays.1.saturating_sub(base.1),
    );

    let mut group = c.benchmark_group("axum_router");
    group.bench_function("without_layer", |b| {
        b.iter_custom(|iters| run(&runtime, &plain, true, iters).0)
    });
    group.bench_function("layer_new_keys", |b| {
        b.iter_custom(|iters| run(&runtime, &guarded, true, iters).0)
    });
    group.bench_function("layer_replays", |b| {
        b.iter_custom(|iters| run(&runtime, &guarded, false, iters).0)
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
