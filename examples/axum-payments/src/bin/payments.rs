//! The payments service: `cargo run -p axum-payments --bin payments`.
//!
//! Listens on `ADDR` (default 127.0.0.1:3000). `IDEMPOTENCY_STORE=memory|redis|sqlite|postgres|mysql`
//! picks the backend (URLs from `REDIS_URL`, `SQLITE_URL`, `DATABASE_URL`, `MYSQL_URL`); over a
//! SQL backend the two POST routes are transactional HTTP. `IDEMPOTENCY_LAYER=off` serves the
//! same handlers without the layer: the baseline that `bench/http-wrk.sh` measures the layer
//! against; `IDEMPOTENCY_LAYER=reference` serves them behind the benchmark reference.
//! `HANDLER_DELAY_MS` pauses the POST handlers after their writes (crash drills);
//! Orders are scoped per caller: `Authorization: Bearer <token>` names it (`API_TOKENS`,
//! `token=caller,…`, lists the accepted tokens; without it each token is a caller of its own),
//! and an order without one is refused 401. `CALLBACK_SECRET` makes the callback check the
//! gateway's signature. Once it accepts
//! connections it prints `listening <addr>` on stdout.
//!
//! On SIGTERM or Ctrl-C it shuts down gracefully: it stops accepting, lets open requests
//! finish, then waits for the background work (handlers whose clients left, completes being
//! retried) to end; all of it within `SHUTDOWN_GRACE_SECS` (default 20), then exits.

use std::process::ExitCode;
use std::time::Duration;

use axum_payments::service::{self, Mode};
use axum_payments::{config, init_logging};
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
    let background = state.background.clone();
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
    let grace = match shutdown_grace() {
        Ok(grace) => grace,
        Err(error) => {
            eprintln!("payments: {error}");
            return ExitCode::from(2);
        }
    };
    stop_requested().await;
    tracing::info!(
        ?grace,
        "shutting down: open requests and background work finish first"
    );
    let deadline = tokio::time::Instant::now() + grace;
    let served = tokio::time::timeout_at(deadline, server.shutdown()).await;
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    let drained = background.shutdown(left).await;
    match served {
        Ok(Ok(())) if drained => ExitCode::SUCCESS,
        Ok(Ok(())) => {
            eprintln!(
                "payments: {} background tasks still running after {grace:?}",
                background.pending()
            );
            ExitCode::FAILURE
        }
        Ok(Err(error)) => {
            eprintln!("payments: {error}");
            ExitCode::FAILURE
        }
        Err(_) => {
            eprintln!("payments: open requests still running after {grace:?}");
            ExitCode::FAILURE
        }
    }
}

/// `SHUTDOWN_GRACE_SECS`: how long a shutdown waits for open requests and background work.
fn shutdown_grace() -> Result<Duration, String> {
    match std::env::var("SHUTDOWN_GRACE_SECS") {
        Err(_) => Ok(Duration::from_secs(20)),
        Ok(value) => value
            .parse::<u64>()
            .map(Duration::from_secs)
            .map_err(|_| format!("SHUTDOWN_GRACE_SECS must be whole seconds, got {value:?}")),
    }
}

/// Resolves at SIGTERM (what an orchestrator sends) or Ctrl-C.
async fn stop_requested() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = terminate.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(error) => {
                tracing::warn!(%error, "no SIGTERM handler; stopping on Ctrl-C only");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}
