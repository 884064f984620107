//! The payments service: `cargo run -p idempotency-examples --bin payments`.
//!
//! Listens on `ADDR` (default 127.0.0.1:3000). `IDEMPOTENCY_STORE=memory|redis|sqlite|postgres|mysql`
//! picks the backend (URLs from `REDIS_URL`, `SQLITE_URL`, `DATABASE_URL`, `MYSQL_URL`); over a
//! SQL backend the two POST routes are transactional HTTP. `IDEMPOTENCY_LAYER=off` serves the
//! same handlers without the layer: the baseline that `bench/http-wrk.sh` measures the layer
//! against; `IDEMPOTENCY_LAYER=reference` serves them behind the benchmark reference.
//! `HANDLER_DELAY_MS` pauses the POST handlers after their writes (crash drills);
//! `CALLBACK_SECRET` makes the callback check the gateway's signature. Once it accepts
//! connections it prints `listening <addr>` on stdout.

use std::process::ExitCode;

use idempotency_examples::payments::service::{self, Mode};
use idempotency_examples::payments::{config, init_logging};
use tokio::net::TcpListener;

#[tokio::main]
async fn main() -> ExitCode {
    init_logging("info,sqlx=warn");
    let addr = std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());
    let backend = match config::backend_from_env().await {
        Ok(backend) => backend,
        Err(error) => {
            eprintln!("payments: {error}");
            return ExitCode::from(2);
        }
    };
    let state = match config::state_from_env(backend.repo.clone()) {
        Ok(state) => state,
        Err(error) => {
            eprintln!("payments: {error}");
            return ExitCode::from(2);
        }
    };
    let listener = match TcpListener::bind(&addr).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("payments: cannot listen on {addr}: {error}");
            return ExitCode::from(2);
        }
    };
    let mode = Mode::from_env();
    let kind = backend.kind;
    let server = match service::spawn(listener, backend, state, mode) {
        Ok(server) => server,
        Err(error) => {
            eprintln!("payments: {error}");
            return ExitCode::FAILURE;
        }
    };
    tracing::info!(addr = %server.addr(), store = kind.as_str(), ?mode, "payments service listening");
    // For scripts and tests that start it on port 0.
    println!("listening {}", server.addr());
    let _ = tokio::signal::ctrl_c().await;
    match server.shutdown().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("payments: {error}");
            ExitCode::FAILURE
        }
    }
}
