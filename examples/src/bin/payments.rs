//! The payments service: `cargo run -p idempotency-examples --bin payments`.
//!
//! Listens on `ADDR` (default 127.0.0.1:3000). `IDEMPOTENCY_STORE=memory|redis|sqlite|postgres|mysql`
//! picks the backend (URLs from `REDIS_URL`, `SQLITE_URL`, `DATABASE_URL`, `MYSQL_URL`).
//! `IDEMPOTENCY_LAYER=off` serves the same handlers without the layer: the baseline that
//! `bench/http-wrk.sh` measures the layer against; `IDEMPOTENCY_LAYER=reference` serves them behind
//! [`Reference`], the least a response-replaying layer does (a benchmark reference, not a layer).

use std::process::ExitCode;

use axum::ServiceExt;
use axum::extract::Request;
use idempotency_examples::payments::reference::Reference;
use idempotency_examples::payments::{AppState, HttpService, app, bare, config, init_logging};
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
    let listener = match TcpListener::bind(&addr).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("payments: cannot listen on {addr}: {error}");
            return ExitCode::from(2);
        }
    };
    let layer = std::env::var("IDEMPOTENCY_LAYER").unwrap_or_else(|_| "on".to_owned());
    let state = AppState::new(backend.repo);
    tracing::info!(%addr, store = backend.kind.as_str(), %layer, "payments service listening");
    let served = match layer.as_str() {
        "off" => serve(listener, bare(state)).await,
        "reference" => serve(listener, Reference::new(bare(state))).await,
        _ => serve(listener, app(state, backend.store)).await,
    };
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("payments: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Serves `service` until Ctrl-C, then lets open requests finish.
async fn serve(listener: TcpListener, service: impl HttpService) -> std::io::Result<()> {
    let service = ServiceExt::<Request>::into_make_service(service);
    axum::serve(listener, service)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
}
