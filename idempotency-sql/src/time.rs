//! Wall-clock helpers of the SQL stores (SQLite's host clock, outbox timestamps).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Microseconds since the Unix epoch (saturating, never panics; 0 before it).
pub(crate) fn unix_micros(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The `SystemTime` for microseconds since the Unix epoch.
pub(crate) fn from_unix_micros(micros: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_micros(micros)
}
