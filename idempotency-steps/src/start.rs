//! What every runner is asked to start, and the defaults runs share.

use std::time::Duration;

use bytes::Bytes;
use idempotency_core::{Fingerprint, Mechanism, StorageKey};

/// How long a run's record blocks its key without a checkpoint, by default. On PostgreSQL and
/// MySQL a dead owner is noticed at once by its hold; the lease matters on SQLite, in leased
/// runs (a dead owner's run is taken over when it ends) and in operators' views (an
/// in-progress record past its lease is listed as abandoned).
pub const DEFAULT_RUN_LEASE: Duration = Duration::from_secs(30);

/// How long a run's answer is kept, by default.
pub const DEFAULT_RUN_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// The most input a run keeps for a resume without its client, by default (64 KiB).
pub const DEFAULT_MAX_INPUT: usize = 64 * 1024;

/// What a runner is asked to start or resume ([`Runner::start`](crate::Runner::start) on a SQL
/// store, [`leased::Runner::start`](crate::leased::Runner::start) on any core store).
#[derive(Clone, Debug)]
pub struct Start<'a> {
    /// The run's storage key.
    pub key: &'a StorageKey,
    /// The scope's namespace, kept in the clear.
    pub namespace: &'a str,
    /// What the key is used with.
    pub fingerprint: &'a Fingerprint,
    /// What a resume without the client needs (kept with the first checkpoint).
    pub input: Bytes,
    /// The front end starting it, kept with the record.
    pub mechanism: Option<Mechanism>,
}

impl<'a> Start<'a> {
    /// A run of `key` in `namespace`, used with `fingerprint`, started with `input`.
    pub fn new(
        key: &'a StorageKey,
        namespace: &'a str,
        fingerprint: &'a Fingerprint,
        input: impl Into<Bytes>,
    ) -> Self {
        Self {
            key,
            namespace,
            fingerprint,
            input: input.into(),
            mechanism: Some(Mechanism::Request),
        }
    }
}
