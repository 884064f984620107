//! Wall-clock helpers shared by the engine and the stores.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (saturating, never panics).
pub(crate) fn unix_millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
