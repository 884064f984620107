//! The payment provider of the checkout: `cargo run -p axum-payments --bin provider`.
//!
//! Listens on `PROVIDER_ADDR` (default 127.0.0.1:3100), the address the payments service
//! captures at. `POST /captures` deduplicates on the `Idempotency-Key` it receives;
//! `GET /captures?order_id=N` counts the order's distinct captures. `PROVIDER_DECLINE_ORDER=N`
//! declines every capture of order N (402), for the drills. The ledger is in memory. Once it
//! accepts connections it prints `listening <addr>` on stdout; it stops on SIGTERM or Ctrl-C.

use std::process::ExitCode;

use axum_payments::init_logging;
use axum_payments::provider::{self, Provider};
use tokio::net::TcpListener;

#[tokio::main]
async fn main() -> ExitCode {
    init_logging("info");
    let addr = provider::addr_from_env();
    let ledger = match Provider::from_env() {
        Ok(ledger) => ledger,
        Err(error) => {
            eprintln!("provider: {error}");
            return ExitCode::from(2);
        }
    };
    let listener = match TcpListener::bind(&addr).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("provider: cannot listen on {addr}: {error}");
            return ExitCode::from(2);
        }
    };
    let bound = match listener.local_addr() {
        Ok(bound) => bound,
        Err(error) => {
            eprintln!("provider: {error}");
            return ExitCode::FAILURE;
        }
    };
    tracing::info!(addr = %bound, "provider listening");
    // For scripts and tests that start it on port 0.
    println!("listening {bound}");
    match axum::serve(listener, ledger.router())
        .with_graceful_shutdown(stop_requested())
        .await
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("provider: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Resolves at SIGTERM or Ctrl-C.
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
