//! Load generator for the HTTP layer: `cargo run --release -p idempotency-bench --bin loadgen`.
//!
//! Serves the payments router in-process on 127.0.0.1 (loopback only) and drives it over 64
//! keep-alive HTTP/1.1 connections (hyper), each run bounded in time and in request count:
//!
//! - `new-keys`: `POST /orders`, a new `Idempotency-Key` on every request — the bare router
//!   against the same router with the idempotency layer (floor: layer ≥ 0.9 × bare).
//! - `replay`: `POST /orders`, one key per connection repeated — the layer replaying the stored
//!   201 against the bare handler serving the same request (floor: replay ≥ 1.0 × handler).
//! - `callback-replay`: the gateway's duplicate `POST /payments/callback` — the layer replaying
//!   against the bare handler answering "already PAID" from its state machine.
//!
//! Variants alternate run by run; each line reports the median of the rounds.
//!
//! Options (also as env): `--seconds N` (3), `--rounds N` (3), `--connections N` (64),
//! `--max-requests N` per run (5 000 000), `--only new-keys|replay|callback-replay`,
//! `--variant bare|layer` (one side only, for profiling), `--in-process` (no TCP: the same
//! number of concurrent callers call the router as a tower service, to isolate the layer's own
//! CPU cost from HTTP parsing and the kernel).

use std::process::ExitCode;
use std::sync::Arc;

use axum_payments::client::post_json;
use axum_payments::{AppState, HttpService, Server, app, bare, gateway};
use http::StatusCode;
use idempotency_bench::load::{
    Drive, MakeRequest, RunResult, Target, describe, drive, load_average, median,
};
use idempotency_core::{BoxStore, MemoryStore};
use serde_json::json;

struct Options {
    seconds: f64,
    rounds: usize,
    connections: usize,
    max_requests: u64,
    only: Option<String>,
    variant: Option<String>,
    in_process: bool,
}

impl Options {
    /// How each run drives the service.
    fn drive(&self) -> Drive {
        Drive {
            seconds: self.seconds,
            connections: self.connections,
            max_requests: self.max_requests,
        }
    }

    fn parse() -> Result<Self, String> {
        let mut options = Self {
            seconds: 3.0,
            rounds: 3,
            connections: 64,
            max_requests: 5_000_000,
            only: None,
            variant: None,
            in_process: false,
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            if flag == "--in-process" {
                options.in_process = true;
                continue;
            }
            let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
            let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
            match flag.as_str() {
                "--seconds" => options.seconds = value.parse().map_err(|e| bad(&e))?,
                "--rounds" => options.rounds = value.parse().map_err(|e| bad(&e))?,
                "--connections" => options.connections = value.parse().map_err(|e| bad(&e))?,
                "--max-requests" => options.max_requests = value.parse().map_err(|e| bad(&e))?,
                "--only" => options.only = Some(value),
                "--variant" => options.variant = Some(value),
                _ => return Err(format!("unknown option {flag}")),
            }
        }
        if !(0.1..=60.0).contains(&options.seconds) {
            return Err("--seconds must be within 0.1..=60".into());
        }
        if !(1..=1024).contains(&options.connections) || !(1..=20).contains(&options.rounds) {
            return Err("--connections must be 1..=1024 and --rounds 1..=20".into());
        }
        Ok(options)
    }
}

/// `POST /orders` with a new key on every request.
fn new_keys(run: u64) -> Arc<MakeRequest> {
    let body = json!({"user_id": 7, "amount_cents": 1299});
    Arc::new(move |connection, sequence| {
        let key = format!("lg-{run}-{connection}-{sequence}");
        post_json("/orders", Some(&key), &body)
    })
}

/// `POST /orders` with one key per connection, repeated.
fn same_key(run: u64) -> Arc<MakeRequest> {
    let body = json!({"user_id": 7, "amount_cents": 1299});
    Arc::new(move |connection, _| {
        let key = format!("lg-{run}-{connection}");
        post_json("/orders", Some(&key), &body)
    })
}

/// The gateway's callback for `order_id`, repeated.
fn callback(order_id: u64) -> Arc<MakeRequest> {
    let body = json!({"trade_no": format!("T-{order_id}"), "order_id": order_id});
    Arc::new(move |_, _| post_json("/payments/callback", None, &body))
}

/// A server for `service`, with one paid order (id 1) when `paid_order` is set.
async fn serve(service: impl HttpService, paid_order: bool) -> Result<Server, String> {
    let server = Server::spawn(service).await.map_err(|e| e.to_string())?;
    if paid_order {
        let order = gateway::create_order(server.addr(), 7, 1299, "lg-order")
            .await
            .map_err(|e| e.to_string())?;
        let first = gateway::deliver_sequentially(
            server.addr(),
            &axum_payments::PaymentCallback {
                trade_no: format!("T-{}", order.order_id),
                order_id: order.order_id,
            },
            1,
        )
        .await
        .map_err(|e| e.to_string())?;
        if first.first().map(|r| r.status) != Some(StatusCode::OK) {
            return Err("the warm-up callback failed".into());
        }
    }
    Ok(server)
}

struct Scenario {
    name: &'static str,
    what: &'static str,
    baseline: &'static str,
    candidate: &'static str,
    floor: f64,
}

const SCENARIOS: [Scenario; 3] = [
    Scenario {
        name: "new-keys",
        what: "POST /orders, new key each request",
        baseline: "bare handler",
        candidate: "with layer",
        floor: 0.9,
    },
    Scenario {
        name: "replay",
        what: "POST /orders, same key repeated",
        baseline: "handler (bare)",
        candidate: "replay",
        floor: 1.0,
    },
    Scenario {
        name: "callback-replay",
        what: "POST /payments/callback, duplicate",
        baseline: "handler (bare, already PAID)",
        candidate: "replay",
        floor: 1.0,
    },
];

async fn measure(
    scenario: &Scenario,
    layer: bool,
    run: u64,
    options: &Options,
) -> Result<RunResult, String> {
    if layer {
        // Unbounded: a run of new keys may pass the default million records.
        let store =
            BoxStore::new(MemoryStore::with_capacity(usize::MAX).with_max_bytes(usize::MAX));
        measure_service(app(AppState::in_memory(), store), scenario, run, options).await
    } else {
        measure_service(bare(AppState::in_memory()), scenario, run, options).await
    }
}

async fn measure_service<S: HttpService>(
    service: S,
    scenario: &Scenario,
    run: u64,
    options: &Options,
) -> Result<RunResult, String> {
    // The served service and `service` share the same state (and store).
    let (server, requests) = match scenario.name {
        "new-keys" => (serve(service.clone(), false).await?, new_keys(run)),
        "replay" => (serve(service.clone(), false).await?, same_key(run)),
        _ => (serve(service.clone(), true).await?, callback(1)),
    };
    let target = if options.in_process {
        Target::InProcess(&service)
    } else {
        Target::Tcp(&server)
    };
    let result = drive(target, &options.drive(), requests).await;
    server.shutdown().await.map_err(|e| e.to_string())?;
    result
}

#[tokio::main]
async fn main() -> ExitCode {
    let options = match Options::parse() {
        Ok(options) => options,
        Err(error) => {
            eprintln!("loadgen: {error}");
            return ExitCode::from(2);
        }
    };
    println!(
        "loadgen: {} {}, {} s per run, {} rounds, memory store, {} build, load average {}",
        options.connections,
        if options.in_process {
            "concurrent callers of the router in-process (no TCP)"
        } else {
            "connections (HTTP/1.1 keep-alive, hyper) to a server in-process on 127.0.0.1"
        },
        options.seconds,
        options.rounds,
        if cfg!(debug_assertions) {
            "DEBUG (numbers meaningless: use --release)"
        } else {
            "release"
        },
        load_average()
    );
    let mut summary = Vec::new();
    let mut run = 0u64;
    for scenario in &SCENARIOS {
        if options
            .only
            .as_deref()
            .is_some_and(|only| only != scenario.name)
        {
            continue;
        }
        println!("\n{} — {}", scenario.name, scenario.what);
        // (throughputs, CPU µs per request) of the baseline and of the layer.
        let mut base: (Vec<f64>, Vec<f64>) = Default::default();
        let mut cand: (Vec<f64>, Vec<f64>) = Default::default();
        for round in 0..options.rounds {
            for layer in [false, true] {
                let wanted = match options.variant.as_deref() {
                    Some("bare") => !layer,
                    Some("layer") => layer,
                    _ => true,
                };
                if !wanted {
                    continue;
                }
                run += 1;
                let result = match measure(scenario, layer, run, &options).await {
                    Ok(result) => result,
                    Err(error) => {
                        eprintln!("loadgen: {}: {error}", scenario.name);
                        return ExitCode::FAILURE;
                    }
                };
                let label = if layer {
                    scenario.candidate
                } else {
                    scenario.baseline
                };
                let cpu = result.cpu_per_request();
                println!(
                    "  round {} {:<30} {:>9.0} req/s {:>7} µs CPU/req  [{}]",
                    round + 1,
                    label,
                    result.throughput(),
                    cpu.map_or_else(|| "?".to_owned(), |cpu| format!("{cpu:.1}")),
                    describe(&result)
                );
                let side = if layer { &mut cand } else { &mut base };
                side.0.push(result.throughput());
                side.1.extend(cpu);
            }
        }
        if base.0.is_empty() || cand.0.is_empty() {
            continue;
        }
        let throughput = (median(&mut base.0), median(&mut cand.0));
        let cpu = (!base.1.is_empty() && !cand.1.is_empty())
            .then(|| (median(&mut base.1), median(&mut cand.1)));
        summary.push((scenario, throughput, cpu));
    }
    println!(
        "\nsummary (median of rounds; CPU ratio = baseline CPU per request / layer CPU per request; load average {})",
        load_average()
    );
    println!(
        "  {:<16} {:>10} {:>10} {:>6} {:>9} {:>9} {:>6} {:>6}",
        "scenario", "base req/s", "layer req/s", "ratio", "base µs", "layer µs", "CPU r.", "floor"
    );
    let mut all_met = true;
    for (scenario, (b, c), cpu) in summary {
        let ratio = c / b;
        let met = ratio >= scenario.floor;
        all_met &= met;
        let (base_cpu, layer_cpu, cpu_ratio) = match cpu {
            Some((bc, lc)) => (
                format!("{bc:.1}"),
                format!("{lc:.1}"),
                format!("{:.3}", bc / lc),
            ),
            None => ("?".into(), "?".into(), "?".into()),
        };
        println!(
            "  {:<16} {:>10.0} {:>10.0} {:>6.3} {:>9} {:>9} {:>6} {:>6.2} {}",
            scenario.name,
            b,
            c,
            ratio,
            base_cpu,
            layer_cpu,
            cpu_ratio,
            scenario.floor,
            if met { "met" } else { "MISSED" }
        );
    }
    if all_met {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
