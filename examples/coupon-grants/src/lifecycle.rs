//! What both services do when they start and stop.

use idempotency_queue::StatsSnapshot;

/// Prints the library's `tracing` events (reconnections, store failures, dead letters) to
/// stderr, filtered by `RUST_LOG` (default `info`; `idempotency_queue=debug` shows every
/// delivery's verdict).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Resolves at SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}

/// The service's last line: what became of the deliveries it handled.
///
/// ```
/// let line = coupon_grants::summary(&idempotency_queue::StatsSnapshot::default());
/// assert!(line.starts_with("stopped: 0 granted, 0 duplicates"));
/// ```
pub fn summary(stats: &StatsSnapshot) -> String {
    format!(
        "stopped: {} granted, {} duplicates, {} already granted per the SQL record, {} requeued, {} rejected",
        stats.processed,
        stats.replayed,
        stats.already_done,
        stats.in_flight + stats.failed + stats.store_unavailable,
        stats.rejected
    )
}
