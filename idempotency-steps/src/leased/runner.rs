//! Starting (or resuming) a leased run: one claim on the core store, and for a duplicate of a
//! live run, a bounded wait for its end.

use std::sync::Arc;
use std::time::Duration;

use idempotency_core::{Claim, ClaimId, ClaimRequest, Error, Lease, Progress, Store};
use tokio::time::Instant;

use super::Run;
use crate::checkpoints;
use crate::{DEFAULT_MAX_INPUT, DEFAULT_RUN_LEASE, DEFAULT_RUN_TTL, Found, Start};

/// The key derivation this release writes (`idempotency-core`'s current one).
const KEY_DERIVATION: u8 = 3;

/// How often a duplicate waiting for a live run reads its record when the store sends no
/// wake-up (a pause, a dead owner's lease ending), at most.
const WAIT_POLL: Duration = Duration::from_millis(100);

/// Starts and resumes runs with steps on any core store that keeps checkpoints
/// ([`Store::checkpoint`]: Redis, Redis Cluster, Valkey, the memory store).
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use idempotency_core::{Fingerprint, IdempotencyKey, Outcome, Scope};
/// use idempotency_redis::RedisStore;
/// use idempotency_steps::Start;
/// use idempotency_steps::leased::{Runner, Started};
///
/// let runner = Runner::new(RedisStore::connect("redis://127.0.0.1:6379").await?);
/// let scope = Scope::new("checkout");
/// let key = scope.storage_key(&IdempotencyKey::parse("K1")?);
/// let input = br#"{"order_id":7}"#;
/// let fingerprint = Fingerprint::of_bytes(input);
/// let start = Start::new(&key, scope.namespace(), &fingerprint, &input[..]);
/// if let Started::Run(mut run) = runner.start(start).await? {
///     let capture: String = run
///         .foreign("capture", async |key| Ok(format!("capture sent with key {key}")))
///         .await?;
///     run.complete(&Outcome::new(201, capture)).await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Runner<S> {
    store: Arc<S>,
    lease: Duration,
    ttl: Duration,
    max_input: usize,
    pub(super) wait: Duration,
}

impl<S> Clone for Runner<S> {
    fn clone(&self) -> Self {
        Self {
            store: Arc::clone(&self.store),
            ..*self
        }
    }
}

/// What [`Runner::start`] found: the run this process owns, or the answer without one.
pub type Started<S> = Found<Run<S>>;

impl<S: Store> Runner<S> {
    /// Runs on `store`, with [`DEFAULT_RUN_LEASE`], [`DEFAULT_RUN_TTL`] and
    /// [`DEFAULT_MAX_INPUT`], and no wait for a live owner's run.
    pub fn new(store: S) -> Self {
        Self {
            store: Arc::new(store),
            lease: DEFAULT_RUN_LEASE,
            ttl: DEFAULT_RUN_TTL,
            max_input: DEFAULT_MAX_INPUT,
            wait: Duration::ZERO,
        }
    }

    /// How long a run's record blocks its key without a checkpoint or heartbeat: how long a
    /// dead owner's run waits before it is taken over.
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How long a run's answer is kept.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The most input a run keeps; a larger input is not kept (only a client's retry can then
    /// resume the run).
    pub fn with_max_input(mut self, bytes: usize) -> Self {
        self.max_input = bytes;
        self
    }

    /// How long [`call`](Self::call) and [`run_once`](Self::run_once) wait for a live owner's
    /// run (see [`start_waiting`](Self::start_waiting)) before they answer
    /// [`CallError::InFlight`](crate::CallError::InFlight); none by default.
    pub fn with_wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// How long a run's answer is kept.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The store, shared (the completer's source scans it).
    pub(super) fn shared_store(&self) -> Arc<S> {
        Arc::clone(&self.store)
    }

    /// Starts the run of `start.key`, or resumes it after its last checkpoint when its owner
    /// paused it or its lease ended (a dead owner). A live owner's run is
    /// [`Started::InFlight`]. One claim (one round trip on Redis for a new key); a resume reads
    /// the record once more.
    pub async fn start(&self, start: Start<'_>) -> Result<Started<S>, Error> {
        self.start_waiting(start, Duration::ZERO).await
    }

    /// [`start`](Self::start), waiting up to `wait` while a live owner runs it: woken by the
    /// store when the owner completes ([`Store::wake_ups`], where the store has them), and
    /// reading the record again at least every 100 ms and when the owner's lease ends, so a
    /// paused or dead owner's run is taken over.
    pub async fn start_waiting(
        &self,
        start: Start<'_>,
        wait: Duration,
    ) -> Result<Started<S>, Error> {
        let deadline = Instant::now() + wait;
        // Subscribed before the first claim: no completion falls between the two.
        let mut woken = match wait.is_zero() {
            true => None,
            false => self.store.wake_ups(start.key).await,
        };
        loop {
            let lease_remaining = match self.store.claim(self.claim(&start)).await? {
                Claim::Acquired(owner) => return self.owned(&start, owner).await,
                Claim::Completed(outcome) => return Ok(Started::Replay(outcome)),
                Claim::Mismatch => return Ok(Started::Mismatch),
                Claim::InProgress { lease_remaining } => lease_remaining,
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(Started::InFlight(
                    lease_remaining.clamp(Duration::from_secs(1), Duration::from_secs(5)),
                ));
            }
            let pause = lease_remaining
                .min(WAIT_POLL)
                .min(left)
                .max(Duration::from_millis(1));
            match woken.as_mut() {
                Some(receiver) => {
                    if let Ok(Err(_)) = tokio::time::timeout(pause, receiver.changed()).await {
                        // The subscription was lost: poll from now on.
                        woken = None;
                    }
                }
                None => tokio::time::sleep(pause).await,
            }
        }
    }

    /// The run this process now owns, its progress read back when it resumes one.
    async fn owned(&self, start: &Start<'_>, owner: Lease) -> Result<Started<S>, Error> {
        let mut run = Run {
            store: Arc::clone(&self.store),
            key: *start.key,
            owner,
            lease: self.lease,
            ttl: self.ttl,
            progress: Progress::new(checkpoints::kept(&start.input, self.max_input)),
            undo: Vec::new(),
            resumed: false,
        };
        if owner.attempt > 1 || owner.took_over {
            let record = self.store.get(start.key).await?;
            if let Some(progress) = record.and_then(|record| record.progress) {
                run.resumed = !progress.steps.is_empty() || progress.ending.is_some();
                run.progress = checkpoints::resumed(progress, start.namespace, owner.attempt);
            }
        }
        Ok(Started::Run(run))
    }

    /// The claim of `start`'s key.
    fn claim<'a>(&self, start: &Start<'a>) -> ClaimRequest<'a> {
        ClaimRequest {
            key: start.key,
            namespace: start.namespace,
            fingerprint: start.fingerprint,
            lease: self.lease,
            claim_id: ClaimId::random(),
            mechanism: start.mechanism,
            key_derivation: Some(KEY_DERIVATION),
        }
    }
}
