//! Redelivery delays.

use std::time::Duration;

/// Exponential redelivery delay: `base`, `2·base`, `4·base` … up to `max`, by delivery count.
///
/// ```
/// use std::time::Duration;
/// use idempotency_queue::Backoff;
///
/// let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
/// assert_eq!(backoff.delay(1), Duration::from_millis(100));
/// assert_eq!(backoff.delay(3), Duration::from_millis(400));
/// assert_eq!(backoff.delay(50), Duration::from_secs(1));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    max: Duration,
}

impl Default for Backoff {
    /// 1 s doubling up to 60 s.
    fn default() -> Self {
        Self::new(Duration::from_secs(1), Duration::from_secs(60))
    }
}

impl Backoff {
    /// A backoff from `base` doubling up to `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Self { base, max }
    }

    /// The delay after the `delivery`-th delivery (1 for the first).
    pub fn delay(&self, delivery: u64) -> Duration {
        let doublings = u32::try_from(delivery.saturating_sub(1))
            .unwrap_or(u32::MAX)
            .min(30);
        self.base.saturating_mul(1 << doublings).min(self.max)
    }
}
