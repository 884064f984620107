//! Wall-clock helpers shared by the stores.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (saturating, never panics).
pub(crate) fn unix_millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

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

/// Microseconds since the Unix epoch now, used to seed fencing tokens so they grow across
/// restarts.
pub(crate) fn unix_micros_now() -> u64 {
    unix_micros(SystemTime::now())
}
