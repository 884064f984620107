//! The engine's settings.

use std::time::Duration;

/// How many duplicates of one in-flight key may wait in one engine by default
/// ([`Config::max_waiters_per_key`](crate::Config::max_waiters_per_key)); more are answered
/// "in flight" at once.
pub const DEFAULT_MAX_WAITERS_PER_KEY: usize = 128;

/// The longest pause, by default, between two reads of an in-flight key's record while
/// duplicates wait for it ([`Config::in_flight_poll`](crate::Config::in_flight_poll)).
pub const DEFAULT_IN_FLIGHT_POLL: Duration = Duration::from_millis(250);

/// Engine settings. Every default can be changed with the `with_*` methods of [`Idempotency`](crate::Idempotency).
#[derive(Clone, Debug)]
pub struct Config {
    /// How long a claim holds before a crashed owner may be taken over. Default 60 s.
    pub lease: Duration,
    /// How long a completed outcome is kept and replayed. Default 24 h.
    pub ttl: Duration,
    /// Whether a running execution renews its lease. Default on.
    pub keep_alive: bool,
    /// The longest a lease is renewed for one execution. Default 10 min.
    pub keep_alive_ceiling: Duration,
    /// The longest any single store call may take before it counts as failed. Default 2 s.
    pub store_timeout: Duration,
    /// Whether claims whose key derivation changed in this release (functions,
    /// `idempotency_function::Call`, `#[idempotent]`; consumers) also claim, first, the key the
    /// previous derivation gave them, so that a fleet running the previous release and this
    /// one side by side never runs one twice, and records the previous release wrote are
    /// replayed. On for one TTL after such an upgrade (see [`Mechanism`](crate::Mechanism)). Default off.
    pub previous_keys: bool,
    /// How many duplicates of one in-flight key may wait for it at once in this engine
    /// ([`InFlightPolicy::Wait`](crate::InFlightPolicy::Wait)); more are answered in flight at once. They share one wait:
    /// one read of the record per tick, however many they are. Default
    /// [`DEFAULT_MAX_WAITERS_PER_KEY`] (128).
    pub max_waiters_per_key: usize,
    /// The longest pause between two reads of an in-flight key's record while duplicates wait
    /// for it (the first comes after 1/32 of it, then doubling). An owner of the same engine
    /// that finishes has it read at once. Default [`DEFAULT_IN_FLIGHT_POLL`] (250 ms).
    pub in_flight_poll: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(60),
            ttl: Duration::from_secs(24 * 60 * 60),
            keep_alive: true,
            keep_alive_ceiling: Duration::from_secs(600),
            store_timeout: Duration::from_secs(2),
            previous_keys: false,
            max_waiters_per_key: DEFAULT_MAX_WAITERS_PER_KEY,
            in_flight_poll: DEFAULT_IN_FLIGHT_POLL,
        }
    }
}
