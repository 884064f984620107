//! The engine: claim a key, keep its lease alive while work runs, store or release the outcome.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use crate::metrics as names;
use crate::{
    Claim, ClaimRequest, FencingToken, Fingerprint, IdempotencyKey, Lease, Outcome, Scope,
    StorageKey, Store, StoreError,
};

/// Engine settings. Every default can be changed with the `with_*` methods of [`Idempotency`].
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
}

impl Default for Config {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(60),
            ttl: Duration::from_secs(24 * 60 * 60),
            keep_alive: true,
            keep_alive_ceiling: Duration::from_secs(600),
            store_timeout: Duration::from_secs(2),
        }
    }
}

/// What to do with a request.
#[derive(Debug)]
pub enum Decision<S: Store> {
    /// Run the work, then [`Execution::complete`] or [`Execution::release`].
    Execute(Execution<S>),
    /// A duplicate of completed work: answer with this stored outcome.
    Replay(Outcome),
    /// A duplicate of work still running elsewhere.
    InFlight {
        /// A hint for when to retry.
        retry_after: Duration,
    },
    /// The key was used with another payload.
    Mismatch,
}

/// The idempotency engine over a store. Cheap to clone.
///
/// See the crate docs for a complete example.
pub struct Idempotency<S> {
    store: Arc<S>,
    config: Arc<Config>,
}

impl<S> Clone for Idempotency<S> {
    fn clone(&self) -> Self {
        Self {
            store: Arc::clone(&self.store),
            config: Arc::clone(&self.config),
        }
    }
}

impl<S> std::fmt::Debug for Idempotency<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Idempotency")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<S: Store> Idempotency<S> {
    /// An engine with the default [`Config`].
    pub fn new(store: S) -> Self {
        Self::with_config(store, Config::default())
    }

    /// An engine with the given settings.
    pub fn with_config(store: S, config: Config) -> Self {
        Self {
            store: Arc::new(store),
            config: Arc::new(config),
        }
    }

    fn map_config(mut self, change: impl FnOnce(&mut Config)) -> Self {
        change(Arc::make_mut(&mut self.config));
        self
    }

    /// Sets the processing lease (default 60 s).
    pub fn with_lease(self, lease: Duration) -> Self {
        self.map_config(|c| c.lease = lease)
    }

    /// Sets how long completed outcomes are kept (default 24 h).
    pub fn with_ttl(self, ttl: Duration) -> Self {
        self.map_config(|c| c.ttl = ttl)
    }

    /// Sets the timeout of each store call (default 2 s).
    pub fn with_store_timeout(self, timeout: Duration) -> Self {
        self.map_config(|c| c.store_timeout = timeout)
    }

    /// Turns lease renewal on or off, and sets its ceiling (default on, 10 min).
    pub fn with_keep_alive(self, enabled: bool, ceiling: Duration) -> Self {
        self.map_config(|c| {
            c.keep_alive = enabled;
            c.keep_alive_ceiling = ceiling;
        })
    }

    /// The settings in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The store, shared.
    pub fn shared_store(&self) -> Arc<S> {
        Arc::clone(&self.store)
    }

    /// Claims `key` in `scope` for a request with `fingerprint`.
    pub async fn begin(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
    ) -> Result<Decision<S>, StoreError> {
        self.begin_storage_key(scope.namespace(), scope.storage_key(key), fingerprint)
            .await
    }

    /// Like [`begin`](Self::begin), but while another owner is in flight, polls (with backoff)
    /// for up to `max_wait` for it to finish, then answers with its outcome.
    pub async fn begin_waiting(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        max_wait: Duration,
    ) -> Result<Decision<S>, StoreError> {
        let deadline = Instant::now() + max_wait;
        let storage_key = scope.storage_key(key);
        let mut pause = Duration::from_millis(5);
        loop {
            let decision = self
                .begin_storage_key(scope.namespace(), storage_key, fingerprint)
                .await?;
            let now = Instant::now();
            match decision {
                Decision::InFlight { .. } if now < deadline => {
                    tokio::time::sleep(pause.min(deadline - now)).await;
                    pause = (pause * 2).min(Duration::from_millis(250));
                }
                other => return Ok(other),
            }
        }
    }

    /// Claims an already hashed key (see [`Scope::storage_key`]).
    pub async fn begin_storage_key(
        &self,
        namespace: &str,
        key: StorageKey,
        fingerprint: &Fingerprint,
    ) -> Result<Decision<S>, StoreError> {
        let config = &self.config;
        let request = ClaimRequest {
            key: &key,
            namespace,
            fingerprint,
            lease: config.lease,
        };
        let claim = self
            .timed("claim", namespace, self.store.claim(request))
            .await?;
        let decision = match claim {
            Claim::Acquired(lease) => {
                let label = if lease.took_over {
                    "takeover"
                } else {
                    "execute"
                };
                if lease.took_over {
                    tracing::warn!(namespace, key = %key, attempt = lease.attempt, "took over an expired lease");
                } else {
                    tracing::debug!(namespace, key = %key, "claimed");
                }
                count_decision(namespace, label);
                Decision::Execute(Execution::start(self.clone(), namespace, key, lease))
            }
            Claim::Completed(outcome) => {
                tracing::debug!(namespace, key = %key, status = outcome.status, "replaying");
                count_decision(namespace, "replay");
                Decision::Replay(outcome)
            }
            Claim::InProgress { lease_remaining } => {
                tracing::debug!(namespace, key = %key, "in flight");
                count_decision(namespace, "in_flight");
                let retry_after =
                    lease_remaining.clamp(Duration::from_secs(1), Duration::from_secs(5));
                Decision::InFlight { retry_after }
            }
            Claim::Mismatch => {
                tracing::info!(namespace, key = %key, "key reused with another payload");
                count_decision(namespace, "mismatch");
                Decision::Mismatch
            }
        };
        Ok(decision)
    }

    async fn timed<T>(
        &self,
        op: &'static str,
        namespace: &str,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let timeout = self.config.store_timeout;
        let result = match tokio::time::timeout(timeout, call).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::Timeout(timeout)),
        };
        if let Err(error) = &result {
            if matches!(error, StoreError::LeaseLost) {
                metrics::counter!(names::STALE_OWNERS, "namespace" => namespace.to_owned(), "op" => op)
                    .increment(1);
                tracing::warn!(namespace, op, "stale owner refused by fencing token");
            } else {
                metrics::counter!(names::STORE_ERRORS, "namespace" => namespace.to_owned(), "op" => op)
                    .increment(1);
                tracing::error!(namespace, op, %error, "idempotency store call failed");
            }
        }
        result
    }
}

fn count_decision(namespace: &str, decision: &'static str) {
    metrics::counter!(names::DECISIONS, "namespace" => namespace.to_owned(), "decision" => decision)
        .increment(1);
}

/// The right to run the work for a claimed key, with its lease renewed in the background.
///
/// Finish with [`complete`](Self::complete) (store the outcome for replay) or
/// [`release`](Self::release) (let a retry run again). Dropping it unfinished releases the key
/// in the background.
pub struct Execution<S: Store> {
    engine: Idempotency<S>,
    namespace: String,
    key: StorageKey,
    lease: Lease,
    keep_alive: Option<JoinHandle<()>>,
    finished: bool,
}

impl<S: Store> std::fmt::Debug for Execution<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Execution")
            .field("namespace", &self.namespace)
            .field("key", &self.key)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl<S: Store> Execution<S> {
    fn start(engine: Idempotency<S>, namespace: &str, key: StorageKey, lease: Lease) -> Self {
        let keep_alive = engine
            .config
            .keep_alive
            .then(|| spawn_keep_alive(engine.clone(), namespace.to_owned(), key, lease.token));
        Self {
            engine,
            namespace: namespace.to_owned(),
            key,
            lease,
            keep_alive,
            finished: false,
        }
    }

    /// The fencing token of this owner.
    pub fn token(&self) -> FencingToken {
        self.lease.token
    }

    /// The lease as claimed (attempt number, whether it was a takeover).
    pub fn lease(&self) -> Lease {
        self.lease
    }

    /// The hashed key.
    pub fn key(&self) -> &StorageKey {
        &self.key
    }

    /// Stores `outcome` for replay. Fails with [`StoreError::LeaseLost`] if another owner took
    /// the key over meanwhile (the outcome is then not stored).
    pub async fn complete(mut self, outcome: Outcome) -> Result<(), StoreError> {
        self.stop_keep_alive();
        self.finished = true;
        let engine = self.engine.clone();
        let ttl = engine.config.ttl;
        engine
            .timed(
                "complete",
                &self.namespace,
                engine
                    .store
                    .complete(&self.key, self.lease.token, &outcome, ttl),
            )
            .await
    }

    /// Deletes the claim so that a retry runs the work again.
    pub async fn release(mut self) -> Result<(), StoreError> {
        self.stop_keep_alive();
        self.finished = true;
        metrics::counter!(names::RELEASED, "namespace" => self.namespace.clone()).increment(1);
        let engine = self.engine.clone();
        engine
            .timed(
                "release",
                &self.namespace,
                engine.store.release(&self.key, self.lease.token),
            )
            .await
    }

    /// Runs `work` to its end while renewing the lease every `lease / 3` (up to the keep-alive
    /// ceiling) from the caller's own task: the inline twin of the background keep-alive, for a
    /// caller that already runs the work in a task of its own and wants no second task per
    /// execution (build its engine with `with_keep_alive(false, ceiling)`). Renewal stops, and
    /// the work goes on, once the ceiling is reached or the lease was lost.
    pub async fn keep_alive_while<F: Future>(&self, work: F) -> F::Output {
        let config = &self.engine.config;
        let period = (config.lease / 3).max(Duration::from_millis(10));
        let until = Instant::now() + config.keep_alive_ceiling;
        let mut work = std::pin::pin!(work);
        loop {
            if let Either::Left(output) = race(work.as_mut(), tokio::time::sleep(period)).await {
                return output;
            }
            if Instant::now() >= until {
                tracing::warn!(namespace = %self.namespace, key = %self.key, "keep-alive ceiling reached; the lease may be taken over");
                return work.await;
            }
            let touch = self.engine.timed(
                "touch",
                &self.namespace,
                self.engine
                    .store
                    .touch(&self.key, self.lease.token, config.lease),
            );
            match race(work.as_mut(), touch).await {
                Either::Left(output) => return output,
                Either::Right(Err(StoreError::LeaseLost)) => return work.await,
                Either::Right(_) => {}
            }
        }
    }

    fn stop_keep_alive(&mut self) {
        if let Some(task) = self.keep_alive.take() {
            task.abort();
        }
    }
}

enum Either<A, B> {
    Left(A),
    Right(B),
}

/// Polls `first` and `second` together; the first to finish wins (`first` is kept, `second`
/// dropped).
async fn race<A: Future, B: Future>(
    mut first: std::pin::Pin<&mut A>,
    second: B,
) -> Either<A::Output, B::Output> {
    let mut second = std::pin::pin!(second);
    std::future::poll_fn(|cx| {
        if let std::task::Poll::Ready(output) = first.as_mut().poll(cx) {
            return std::task::Poll::Ready(Either::Left(output));
        }
        second.as_mut().poll(cx).map(Either::Right)
    })
    .await
}

impl<S: Store> Drop for Execution<S> {
    fn drop(&mut self) {
        self.stop_keep_alive();
        if self.finished {
            return;
        }
        tracing::warn!(namespace = %self.namespace, key = %self.key, "execution dropped unfinished; releasing the key");
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let engine = self.engine.clone();
            let namespace = std::mem::take(&mut self.namespace);
            let key = self.key;
            let token = self.lease.token;
            runtime.spawn(async move {
                let _ = engine
                    .timed("release", &namespace, engine.store.release(&key, token))
                    .await;
            });
        }
    }
}

fn spawn_keep_alive<S: Store>(
    engine: Idempotency<S>,
    namespace: String,
    key: StorageKey,
    token: FencingToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let config = &engine.config;
        let period = (config.lease / 3).max(Duration::from_millis(10));
        let until = Instant::now() + config.keep_alive_ceiling;
        loop {
            tokio::time::sleep(period).await;
            if Instant::now() >= until {
                tracing::warn!(namespace, key = %key, "keep-alive ceiling reached; the lease may be taken over");
                return;
            }
            let touched = engine
                .timed(
                    "touch",
                    &namespace,
                    engine.store.touch(&key, token, config.lease),
                )
                .await;
            if let Err(StoreError::LeaseLost) = touched {
                return;
            }
        }
    })
}

#[cfg(all(test, feature = "memory"))]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::{IdempotencyKey, MemoryStore};

    #[tokio::test]
    async fn inline_keep_alive_holds_the_lease_while_work_runs() {
        let engine = Idempotency::new(MemoryStore::new())
            .with_lease(Duration::from_millis(90))
            .with_keep_alive(false, Duration::from_secs(60));
        let (scope, key) = (Scope::new("t"), IdempotencyKey::parse("k").unwrap());
        let fingerprint = Fingerprint::of_bytes(b"x");
        let Decision::Execute(execution) = engine.begin(&scope, &key, &fingerprint).await.unwrap()
        else {
            panic!("a new key runs");
        };
        let rival = engine.clone();
        let (scope2, key2) = (scope.clone(), key.clone());
        let work = async move {
            // Three leases later the key is still held: renewed inline.
            tokio::time::sleep(Duration::from_millis(300)).await;
            rival.begin(&scope2, &key2, &fingerprint).await.unwrap()
        };
        let seen = execution.keep_alive_while(work).await;
        assert!(matches!(seen, Decision::InFlight { .. }), "{seen:?}");
        execution.complete(Outcome::new(200, "ok")).await.unwrap();
    }
}
