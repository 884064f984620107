//! The rule the durations of a two-tier consumer obey ([`check_fast_tier`]) and the error naming
//! the durations that break it ([`TierConfigError`]). A leaf: the consumer checks the rule as
//! [`TwoTier`](super::TwoTier) does, without depending on the builder.

use std::fmt;
use std::time::Duration;

/// Refuses a fast tier whose record of a key could outlive the truth's: the fast record is
/// written after the truth's commit, within the fast tier's lease.
pub(crate) fn check_fast_tier(
    fast_ttl: Duration,
    fast_lease: Duration,
    truth_ttl: Duration,
) -> Result<(), TierConfigError> {
    if fast_ttl.saturating_add(fast_lease) > truth_ttl {
        return Err(TierConfigError::FastTierOutlivesTruth {
            fast_ttl,
            fast_lease,
            truth_ttl,
        });
    }
    Ok(())
}

/// Why a two-tier configuration is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TierConfigError {
    /// The fast tier would vouch for keys whose truth record is gone.
    FastTierOutlivesTruth {
        /// The fast tier's TTL (`Idempotency::with_ttl`).
        fast_ttl: Duration,
        /// The fast tier's lease (`Idempotency::with_lease`).
        fast_lease: Duration,
        /// The truth's TTL ([`SqlTruth::with_ttl`](super::SqlTruth::with_ttl)).
        truth_ttl: Duration,
    },
    /// A sender or the broker may deliver again after the truth forgot the key.
    ShorterThanHorizon {
        /// The truth's TTL ([`SqlTruth::with_ttl`](super::SqlTruth::with_ttl)).
        truth_ttl: Duration,
        /// The retry horizon ([`TwoTier::retry_horizon`](super::TwoTier::retry_horizon)).
        horizon: Duration,
    },
}

impl fmt::Display for TierConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::FastTierOutlivesTruth {
                fast_ttl,
                fast_lease,
                truth_ttl,
            } => write!(
                f,
                "the fast tier outlives its truth: fast-tier TTL {} plus its lease {} exceeds the \
                 SQL truth's TTL {}; shorten the fast tier's TTL (`Idempotency::with_ttl`) or \
                 keep the truth longer (`SqlTruth::with_ttl`)",
                human(*fast_ttl),
                human(*fast_lease),
                human(*truth_ttl)
            ),
            Self::ShorterThanHorizon { truth_ttl, horizon } => write!(
                f,
                "the SQL truth's TTL {} is shorter than the retry horizon {}: a retry after it \
                 would run the work again; keep the truth longer (`SqlTruth::with_ttl`)",
                human(*truth_ttl),
                human(*horizon)
            ),
        }
    }
}

impl std::error::Error for TierConfigError {}

/// `7d`, `48h`, `90s`, `1h30m`: the largest units that say it exactly.
fn human(duration: Duration) -> String {
    let seconds = duration.as_secs();
    if duration.subsec_nanos() != 0 || seconds == 0 {
        return format!("{duration:?}");
    }
    let mut out = String::new();
    let mut left = seconds;
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if left >= size {
            out.push_str(&format!("{}{unit}", left / size));
            left %= size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn a_fast_tier_that_outlives_its_truth_is_refused_naming_both_ttls() {
        let error = check_fast_tier(48 * HOUR, Duration::from_secs(60), 24 * HOUR).unwrap_err();
        let text = error.to_string();
        assert!(text.contains("fast-tier TTL 2d"), "{text}");
        assert!(text.contains("SQL truth's TTL 1d"), "{text}");
        assert!(text.contains("lease 1m"), "{text}");
        // Equal TTLs: the fast record, written after the truth's commit, would outlive it.
        assert!(check_fast_tier(24 * HOUR, Duration::from_secs(60), 24 * HOUR).is_err());
        assert_eq!(
            check_fast_tier(48 * HOUR, Duration::from_secs(60), 7 * 24 * HOUR),
            Ok(())
        );
    }

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(human(7 * 24 * HOUR), "7d");
        assert_eq!(human(HOUR + Duration::from_secs(1800)), "1h30m");
        assert_eq!(human(Duration::from_millis(1500)), "1.5s");
    }
}
