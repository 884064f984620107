//! What the layer's tracing costs on its hot path (memory store, header key): `n` requests of
//! new keys, then `n` replays, through the same axum router, with no subscriber or with a `fmt`
//! subscriber filtering at INFO or at DEBUG (writing to a sink). Prints nanoseconds per request; run under
//! callgrind for instruction counts that repeat (`bench/spans-callgrind.sh`).
//!
//! `cargo bench -p idempotency-tower --bench spans -- [none|info|debug] [new-keys|replay] [n]`
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use axum::Router;
use axum::routing::post;
use idempotency_core::MemoryStore;
use idempotency_tower::IdempotencyLayer;

mod support;
use support::{call, order};

/// The measured requests (callgrind counts this function only: `--toggle-collect`).
#[inline(never)]
fn measured_requests(runtime: &tokio::runtime::Runtime, app: &Router, keys: &[String]) {
    runtime.block_on(async {
        for key in keys {
            call(app, order(key)).await;
        }
    });
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let subscriber = args.first().map_or("none", String::as_str);
    let scenario = args.get(1).map_or("new-keys", String::as_str);
    let n: usize = args.get(2).map_or(20_000, |n| n.parse().unwrap());
    match subscriber {
        "none" => {}
        // As a service logs to a file or a collector: no colours.
        "info" | "debug" => tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(subscriber))
            .with_ansi(false)
            .with_writer(std::io::sink)
            .init(),
        other => panic!("subscriber: none, info or debug, not {other}"),
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let app = Router::new()
        .route(
            "/orders",
            post(|body: axum::body::Bytes| async move {
                (axum::http::StatusCode::CREATED, [("x-order", "1")], body)
            }),
        )
        .layer(
            IdempotencyLayer::builder(MemoryStore::new())
                .shared_scope()
                .build(),
        );
    let keys: Vec<String> = match scenario {
        "new-keys" => (0..n).map(|i| format!("bench-{i}")).collect(),
        "replay" => (0..n).map(|i| format!("replay-{}", i % 64)).collect(),
        other => panic!("scenario: new-keys or replay, not {other}"),
    };
    // Warm-up: the first requests of each key (replays then find them completed).
    let warm: Vec<String> = match scenario {
        "replay" => (0..64).map(|i| format!("replay-{i}")).collect(),
        _ => (0..1_000).map(|i| format!("warm-{i}")).collect(),
    };
    measured_requests_warm(&runtime, &app, &warm);
    let start = Instant::now();
    measured_requests(&runtime, &app, &keys);
    let per_request = start.elapsed().as_nanos() / n as u128;
    println!("{subscriber} {scenario}: {n} requests, {per_request} ns/request (wall)");
}

#[inline(never)]
fn measured_requests_warm(runtime: &tokio::runtime::Runtime, app: &Router, keys: &[String]) {
    runtime.block_on(async {
        for key in keys {
            call(app, order(key)).await;
        }
    });
}
