//! Redis errors and time limits mapped to [`StoreError`].

use std::future::Future;
use std::time::Duration;

use ::redis::{ErrorKind, RedisError, ServerErrorKind};

use idempotency_core::{Cause, StoreError};

/// Maps a Redis error: unreachable, dropped or failing-over servers are
/// [`StoreError::Unavailable`], I/O time-outs [`StoreError::Timeout`], the rest
/// [`StoreError::Backend`].
pub(super) fn map_error(error: RedisError, limit: Duration) -> StoreError {
    if error.is_timeout() {
        return StoreError::Timeout(limit);
    }
    let unavailable = error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_unrecoverable_error()
        || matches!(
            error.kind(),
            ErrorKind::ClusterConnectionNotFound
                | ErrorKind::Server(
                    ServerErrorKind::ClusterDown
                        | ServerErrorKind::TryAgain
                        | ServerErrorKind::MasterDown
                        | ServerErrorKind::BusyLoading
                        | ServerErrorKind::ReadOnly
                )
        );
    if unavailable {
        StoreError::Unavailable(Cause::new(error))
    } else {
        StoreError::Backend(Cause::new(error))
    }
}

/// Runs one store operation, all its round trips, under `limit`: never longer, whatever the
/// connection does.
pub(super) async fn bounded<T>(
    limit: Duration,
    operation: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(limit, operation).await {
        Ok(result) => result,
        Err(_) => Err(StoreError::Timeout(limit)),
    }
}

/// Whole milliseconds, rounded up, at least 1 (Redis rejects a zero `PX`).
pub(super) fn millis(duration: Duration) -> u64 {
    let millis = duration.as_nanos().div_ceil(1_000_000).max(1);
    u64::try_from(millis).unwrap_or(u64::MAX)
}
