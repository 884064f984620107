//! Starting (or resuming) a run with steps: the owner's hold, then the claim.

use std::time::Duration;

use bytes::Bytes;
use idempotency_core::{Claim, ClaimId, ClaimRequest, Error, Lease, Progress, StorageKey};
use idempotency_sql::StepStore;
use sqlx::pool::PoolConnection;

use crate::checkpoints;
use crate::run::Run;
use crate::tx::Db;
use crate::{DEFAULT_MAX_INPUT, DEFAULT_RUN_LEASE, DEFAULT_RUN_TTL, Found, Start};

/// Starts and resumes runs with steps on a SQL store.
///
/// ```no_run
/// # #[cfg(feature = "postgres")]
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// use idempotency_core::{Fingerprint, IdempotencyKey, Outcome, Scope};
/// use idempotency_sql::PostgresStore;
/// use idempotency_steps::{Runner, Start, Started, StepError};
///
/// let store = PostgresStore::new(pool);
/// store.migrate().await?;
/// let runner = Runner::new(store);
/// let scope = Scope::new("checkout");
/// let key = scope.storage_key(&IdempotencyKey::parse("K1")?);
/// let input = br#"{"order_id":7}"#;
/// let fingerprint = Fingerprint::of_bytes(input);
/// let start = Start::new(&key, scope.namespace(), &fingerprint, &input[..]);
/// if let Started::Run(mut run) = runner.start(start).await? {
///     let reserved: bool = run
///         .local("reserve", async |tx| {
///             sqlx::query("UPDATE orders SET reserved = true WHERE id = 7")
///                 .execute(&mut **tx)
///                 .await?;
///             Ok(true)
///         })
///         .await?;
///     let capture: String = run
///         .foreign("capture", async |key| Ok(format!("capture sent with key {key}")))
///         .await?;
///     run.complete(&Outcome::new(201, capture)).await?;
///     # let _ = reserved;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Runner<S> {
    store: S,
    lease: Duration,
    ttl: Duration,
    max_input: usize,
    pub(crate) wait: Duration,
}

/// What [`Runner::start`] found: the run this process owns, or the answer without one.
pub type Started<S> = Found<Run<S>>;

impl<S: StepStore> Runner<S> {
    /// Runs on `store`, with [`DEFAULT_RUN_LEASE`], [`DEFAULT_RUN_TTL`] and
    /// [`DEFAULT_MAX_INPUT`].
    pub fn new(store: S) -> Self {
        Self {
            store,
            lease: DEFAULT_RUN_LEASE,
            ttl: DEFAULT_RUN_TTL,
            max_input: DEFAULT_MAX_INPUT,
            wait: Duration::ZERO,
        }
    }

    /// How long a run's record blocks its key without a checkpoint.
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
    /// run (woken by the database when it ends, see [`start_waiting`](Self::start_waiting))
    /// before they answer [`CallError::InFlight`](crate::CallError::InFlight); none by default.
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

    /// Starts the run of `start.key`, or resumes it after its last checkpoint when an earlier
    /// owner is gone (its hold ended with its connection, or its lease ended on SQLite). A
    /// live owner's run is [`Started::InFlight`].
    ///
    /// Costs one statement on PostgreSQL (the hold and the claim of a new key), four on MySQL;
    /// a resume reads the record once more.
    pub async fn start(&self, start: Start<'_>) -> Result<Started<S>, Error> {
        self.start_waiting(start, Duration::ZERO).await
    }

    /// [`start`](Self::start), waiting up to `wait` while a live owner runs it: on PostgreSQL
    /// and MySQL the database wakes the waiter when the owner completes, pauses or dies (its
    /// hold is given back), and the waiter then replays the answer or takes the run over. A
    /// waiter blocks one connection while it waits. SQLite answers [`Started::InFlight`] at
    /// once (poll again).
    pub async fn start_waiting(
        &self,
        start: Start<'_>,
        wait: Duration,
    ) -> Result<Started<S>, Error> {
        let mut conn = self
            .store
            .pool()
            .acquire()
            .await
            .map_err(idempotency_sql::from_sqlx)?;
        let request = self.claim(&start);
        let (mut held, mut claim) = match self.store.start_on(&mut conn, request).await {
            Ok(started) => started,
            Err(error) => return Err(self.failed(conn, start.key, error)),
        };
        if !held && claim.is_none() && !wait.is_zero() && S::HOLD_ENDS_WITH_CONNECTION {
            // A wait the database bounds; a waiter dropped meanwhile closes its connection,
            // so a hold taken after it is given back.
            conn.close_on_drop();
            held = match self.store.hold_waiting_on(&mut conn, start.key, wait).await {
                Ok(held) => held,
                Err(error) => return Err(self.failed(conn, start.key, error)),
            };
            if held {
                claim = match self
                    .store
                    .claim_held_on(&mut conn, self.claim(&start))
                    .await
                {
                    Ok(claim) => Some(claim),
                    Err(error) => return Err(self.failed(conn, start.key, error)),
                };
            }
        }
        let started = match claim {
            Some(Claim::Acquired(owner)) if held => return self.owned(conn, &start, owner).await,
            Some(Claim::Completed(outcome)) => Started::Replay(outcome),
            Some(Claim::Mismatch) => Started::Mismatch,
            Some(Claim::InProgress { lease_remaining }) => Started::InFlight(
                lease_remaining.clamp(Duration::from_secs(1), Duration::from_secs(5)),
            ),
            Some(Claim::Acquired(_)) | None => Started::InFlight(Duration::from_secs(1)),
        };
        if held {
            self.release_hold(conn, start.key).await;
        }
        Ok(started)
    }

    /// A start that failed: a hold it may have taken is given back with the connection.
    fn failed(&self, mut conn: PoolConnection<Db<S>>, key: &StorageKey, error: Error) -> Error {
        conn.close_on_drop();
        self.store.forget_hold(key);
        error
    }

    /// The run this process now owns, its progress read back when it resumes one.
    async fn owned(
        &self,
        conn: PoolConnection<Db<S>>,
        start: &Start<'_>,
        owner: Lease,
    ) -> Result<Started<S>, Error> {
        let mut run = Run {
            store: self.store.clone(),
            conn,
            key: *start.key,
            owner,
            lease: self.lease,
            ttl: self.ttl,
            progress: Progress::new(self.kept(&start.input)),
            pending: None,
            in_step: false,
            undo: Vec::new(),
            held: true,
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

    /// The input kept for a resume: `input` if within the bound.
    fn kept(&self, input: &Bytes) -> Bytes {
        checkpoints::kept(input, self.max_input)
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
            key_derivation: self
                .store
                .tx_request(start.namespace, start.key, start.fingerprint)
                .key_derivation,
        }
    }

    /// Gives a hold back that no run keeps; a connection whose hold stays is closed.
    async fn release_hold(&self, mut conn: PoolConnection<Db<S>>, key: &StorageKey) {
        if self.store.unhold(&mut conn, key).await.is_err() {
            conn.close_on_drop();
            self.store.forget_hold(key);
        }
    }
}
