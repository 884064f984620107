//! The same axum router in process, with and without the idempotency layer: new keys (one claim
//! plus one complete each) and replays (one claim each), for a header key and for a key read from
//! a JSON body. Prints the overhead (worker CPU time per request), then lets
//! criterion measure each case.
//!
//! `cargo bench -p idempotency-tower --bench layer` (add `-- none` to print the overhead only)
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::routing::post;
use criterion::{Criterion, criterion_group, criterion_main};
use idempotency_core::MemoryStore;
use idempotency_tower::IdempotencyLayer;

mod support;
use support::{call, order};

const CALLBACK: &str = r#"{"trade_no":"T-20261130-000042","order_id":42,"amount":1250,"currency":"EUR","paid_at":"2026-11-30T08:00:00Z","sign":"c2lnbmF0dXJl"}"#;

fn router() -> Router {
    Router::new().route(
        "/orders",
        post(|body: axum::body::Bytes| async move {
            (axum::http::StatusCode::CREATED, [("x-order", "1")], body)
        }),
    )
}

fn callback_router() -> Router {
    Router::new().route(
        "/payments/callback",
        post(
            |body: axum::body::Bytes| async move { ([("content-type", "application/json")], body) },
        ),
    )
}

fn callback(trade_no: &str) -> http::Request<Body> {
    let body = CALLBACK.replace("T-20261130-000042", trade_no);
    http::Request::post("/payments/callback")
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap()
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

/// What `n` requests cost: wall time and the worker's CPU time.
struct Cost {
    wall: Duration,
    cpu: Option<Duration>,
}

/// Runs `n` sequential requests inside a task on the runtime's only worker, as a server runs its
/// connections (anything the layer spawns would stay on that worker). `new_keys`: a new key
/// every request, else one key repeated (replays).
fn run(
    runtime: &tokio::runtime::Runtime,
    app: &Router,
    request: fn(&str) -> http::Request<Body>,
    new_keys: bool,
    n: u64,
) -> Cost {
    let app = app.clone();
    runtime
        .block_on(runtime.spawn(async move {
            let keys: Vec<String> = (0..n)
                .map(|_| {
                    if new_keys {
                        fresh_key()
                    } else {
                        "replayed".to_owned()
                    }
                })
                .collect();
            let cpu = thread_cpu_ns();
            let start = Instant::now();
            for key in &keys {
                call(&app, request(key)).await;
            }
            let wall = start.elapsed();
            let cpu = cpu
                .zip(thread_cpu_ns())
                .map(|(before, after)| Duration::from_nanos(after.saturating_sub(before)));
            Cost { wall, cpu }
        }))
        .unwrap()
}

/// Per request: wall time, CPU time.
fn per_request(cost: Cost, n: u64) -> (Duration, Duration) {
    let n = n as u32;
    (cost.wall / n, cost.cpu.unwrap_or(cost.wall) / n)
}

fn report(what: &str, base: (Duration, Duration), cases: &[(&str, (Duration, Duration))]) {
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    let mut line = format!("{what} (worker CPU): without {:?}/req", base.1);
    for (name, case) in cases {
        line.push_str(&format!(
            "; {name} {:?}/req ({:.2}x, +{:?})",
            case.1,
            ratio(case.1, base.1),
            case.1.saturating_sub(base.1),
        ));
    }
    println!("{line}");
    let mut wall = format!("{what} (wall): without {:?}/req", base.0);
    for (name, case) in cases {
        wall.push_str(&format!(
            "; {name} {:?}/req ({:.2}x)",
            case.0,
            ratio(case.0, base.0)
        ));
    }
    println!("{wall}");
}

fn layer_overhead(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let plain = router();
    let guarded = router().layer(
        IdempotencyLayer::builder(MemoryStore::new())
            .shared_scope()
            .build(),
    );
    let plain_callback = callback_router();
    let guarded_callback = callback_router().layer(
        IdempotencyLayer::builder(MemoryStore::new())
            .shared_scope()
            .namespace("payments.callback")
            .key_from_json("/trade_no")
            .fingerprint_json_fields(["/trade_no", "/order_id"])
            .wait_in_flight(Duration::from_secs(5))
            .build(),
    );
    runtime.block_on(call(&guarded, order("replayed")));
    runtime.block_on(call(&guarded_callback, callback("replayed")));

    let n = 20_000;
    for app in [&plain, &guarded] {
        run(&runtime, app, order, true, n / 10);
    }
    for app in [&plain_callback, &guarded_callback] {
        run(&runtime, app, callback, true, n / 10);
    }
    let base = per_request(run(&runtime, &plain, order, true, n), n);
    let new_keys = per_request(run(&runtime, &guarded, order, true, n), n);
    let replays = per_request(run(&runtime, &guarded, order, false, n), n);
    report(
        "header key",
        base,
        &[("new keys", new_keys), ("replays", replays)],
    );
    let base = per_request(run(&runtime, &plain_callback, callback, true, n), n);
    let new_keys = per_request(run(&runtime, &guarded_callback, callback, true, n), n);
    let replays = per_request(run(&runtime, &guarded_callback, callback, false, n), n);
    report(
        "JSON body key",
        base,
        &[("new keys", new_keys), ("replays", replays)],
    );

    let mut group = c.benchmark_group("axum_router");
    group.bench_function("without_layer", |b| {
        b.iter_custom(|iters| run(&runtime, &plain, order, true, iters).wall)
    });
    group.bench_function("layer_new_keys", |b| {
        b.iter_custom(|iters| run(&runtime, &guarded, order, true, iters).wall)
    });
    group.bench_function("layer_replays", |b| {
        b.iter_custom(|iters| run(&runtime, &guarded, order, false, iters).wall)
    });
    group.bench_function("json_key_without_layer", |b| {
        b.iter_custom(|iters| run(&runtime, &plain_callback, callback, false, iters).wall)
    });
    group.bench_function("json_key_layer_replays", |b| {
        b.iter_custom(|iters| run(&runtime, &guarded_callback, callback, false, iters).wall)
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
