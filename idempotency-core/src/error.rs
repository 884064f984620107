//! The one error type every store returns.

use std::time::Duration;

/// What can go wrong when talking to a store.
///
/// Front ends map [`StoreError::Unavailable`] and [`StoreError::Timeout`] to "try again later"
/// (HTTP 503, gRPC `UNAVAILABLE`); [`StoreError::LeaseLost`] means a stale owner tried to finish
/// work that another owner has taken over, and is refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The backend could not be reached or failed to answer (connection refused, reset, I/O).
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The backend did not answer within the configured time.
    #[error("store timed out after {0:?}")]
    Timeout(Duration),
    /// The caller's fencing token is no longer current: the lease expired and another owner took
    /// the key over, or the record is gone. The write was not applied.
    #[error("lease lost: the fencing token is stale")]
    LeaseLost,
    /// The store is full and holds no expired record to evict.
    #[error("store capacity of {0} records reached")]
    CapacityExceeded(usize),
    /// A stored record could not be decoded, or a value could not be encoded.
    #[error("store codec error: {0}")]
    Codec(String),
    /// The store was configured wrongly (for example a table name that is not an identifier).
    #[error("store misconfigured: {0}")]
    Config(String),
    /// Any other backend error.
    #[error("store backend error: {0}")]
    Backend(String),
}

impl StoreError {
    /// Whether a retry later may succeed (the store is down, slow or full), as opposed to a
    /// refusal ([`StoreError::LeaseLost`]) or a configuration or data error.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Unavailable(_) | Self::Timeout(_) | Self::CapacityExceeded(_) | Self::Backend(_)
        )
    }
}
