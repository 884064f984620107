//! The memory store's timestamps: microseconds since the UNIX epoch in 8 bytes, where a
//! `SystemTime` takes 16 (a record keeps four).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Microseconds since the UNIX epoch. `Micros::NEVER` (0) stands for "not yet" where a time
/// is optional; a clock before 1970 reads as 0 too.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Micros(u64);

impl Micros {
    /// No time: an optional time not set.
    pub(super) const NEVER: Self = Self(0);

    /// The current time.
    pub(super) fn now() -> Self {
        Self::of(SystemTime::now())
    }

    /// `at`, saturating (a time before the epoch is 0).
    pub(super) fn of(at: SystemTime) -> Self {
        Self(
            at.duration_since(UNIX_EPOCH)
                .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
                .unwrap_or(0),
        )
    }

    /// The microseconds themselves (where fencing tokens start, so that they grow across
    /// restarts).
    pub(super) fn get(self) -> u64 {
        self.0
    }

    /// `self` plus `duration` (at most the largest time).
    pub(super) fn plus(self, duration: Duration) -> Self {
        let micros = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
        Self(self.0.saturating_add(micros))
    }

    /// How long from `earlier` to `self` (zero if `earlier` is later).
    pub(super) fn since(self, earlier: Self) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0))
    }

    /// As a `SystemTime`.
    pub(super) fn to_system_time(self) -> SystemTime {
        UNIX_EPOCH + Duration::from_micros(self.0)
    }

    /// As a `SystemTime`, `None` for [`Micros::NEVER`].
    pub(super) fn to_optional_system_time(self) -> Option<SystemTime> {
        (self != Self::NEVER).then(|| self.to_system_time())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micros_round_trip_to_the_microsecond_and_order_as_times_do() {
        let time = UNIX_EPOCH + Duration::new(1_790_000_000, 123_456_789);
        let micros = Micros::of(time);
        assert_eq!(
            micros.to_system_time(),
            UNIX_EPOCH + Duration::new(1_790_000_000, 123_456_000)
        );
        let later = micros.plus(Duration::from_millis(1500));
        assert!(later > micros);
        assert_eq!(later.since(micros), Duration::from_millis(1500));
        assert_eq!(micros.since(later), Duration::ZERO);
        assert_eq!(Micros(u64::MAX - 1).plus(Duration::MAX), Micros(u64::MAX));
        assert_eq!(Micros::NEVER.to_optional_system_time(), None);
        assert_eq!(
            micros.to_optional_system_time(),
            Some(micros.to_system_time())
        );
        assert!(Micros::now() > micros);
    }
}
