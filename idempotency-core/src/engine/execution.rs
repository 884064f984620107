//! The right to run the work for a claimed key: keep-alive, complete, release.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use super::handle::Idempotency;
use super::recovery;
use crate::Namespace;
use crate::metrics::StoreOp;
use crate::telemetry;
use crate::{
    CompleteRequest, FencingToken, Lease, Outcome, StorageKey, Store, StoreError, TouchRequest,
};

/// The right to run the work for a claimed key, with its lease renewed in the background.
///
/// Finish with [`complete`](Self::complete) (store the outcome for replay) or
/// [`release`](Self::release) (let a retry run again). Dropping it unfinished releases the key
/// in the background.
pub struct Execution<S: Store> {
    pub(super) engine: Idempotency<S>,
    pub(super) namespace: Namespace,
    pub(super) key: StorageKey,
    pub(super) lease: Lease,
    pub(super) keep_alive: Option<JoinHandle<()>>,
    pub(super) finished: bool,
    /// The same call's claim of the key the previous derivation gave it
    /// ([`Config::previous_keys`]): completed first (nodes of the previous release look only
    /// there) and released with this one.
    pub(super) previous: Option<Box<Execution<S>>>,
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
    pub(super) fn start(
        engine: Idempotency<S>,
        namespace: Namespace,
        key: StorageKey,
        lease: Lease,
    ) -> Self {
        let keep_alive = engine
            .inner
            .config
            .keep_alive
            .then(|| spawn_keep_alive(engine.clone(), namespace.clone(), key, lease.token));
        Self {
            engine,
            namespace,
            key,
            lease,
            keep_alive,
            finished: false,
            previous: None,
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

    /// The idempotency key of this work's foreign call `step` ([`StorageKey::downstream`]),
    /// derived from the oldest record the execution holds: while previous keys are read
    /// ([`Config::previous_keys`](crate::Config::previous_keys)), a node of this release that takes over the work of a node of
    /// the previous one sends the key that node sent.
    pub fn downstream_key(&self, step: &str) -> String {
        match &self.previous {
            Some(previous) => previous.downstream_key(step),
            None => self.key.downstream(step),
        }
    }

    /// The namespace the key was claimed in.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// Stores `outcome` for replay. Fails with [`StoreError::LeaseLost`] if another owner took
    /// the key over meanwhile (the outcome is then not stored). A transient failure (a timeout,
    /// a lost connection) is returned, and the complete retried in the background meanwhile,
    /// the lease renewed, until it lands or the lease ends.
    ///
    /// (An `async` block rather than an `async fn`: the execution and the outcome are then kept
    /// once in the future, not twice.)
    #[allow(clippy::manual_async_fn)] // an `async fn` would keep `self` and `outcome` twice
    pub fn complete(mut self, outcome: Outcome) -> impl Future<Output = Result<(), StoreError>> {
        async move {
            if let Some(twin) = self.previous.take() {
                // Logged and retried by the twin itself; this key is completed whatever it says.
                let _ = Box::pin(twin.complete(outcome.clone())).await;
            }
            self.stop_keep_alive();
            self.finished = true;
            let engine = &self.engine;
            let ttl = engine.inner.config.ttl;
            let store = &engine.inner.store;
            let result = {
                let call = std::pin::pin!(store.complete(CompleteRequest {
                    key: &self.key,
                    token: self.lease.token,
                    outcome: &outcome,
                    ttl
                }));
                engine
                    .timed(StoreOp::Complete, self.namespace.by_ref(), call)
                    .await
            };
            engine.inner.waits.wake(&self.key);
            if matches!(&result, Err(error) if error.is_transient()) {
                self.finish_later(recovery::Finish::Complete(outcome), true);
            }
            if result.is_ok() {
                telemetry::record_current(telemetry::FINISH, "completed");
            }
            result
        }
    }

    /// Leaves the claim in progress, without an outcome and without a store call: for a fast
    /// tier whose truth is kept elsewhere, committed with the work (a two-tier consumer's SQL
    /// record). The record stays *pending* until its lease ends; a duplicate that meets it asks
    /// the truth, which knows whether the work committed.
    pub fn leave_pending(mut self) {
        if let Some(twin) = self.previous.take() {
            twin.leave_pending();
        }
        self.stop_keep_alive();
        self.finished = true;
        self.engine
            .inner
            .store
            .leave_pending(&self.key, self.lease.token);
        self.engine.inner.waits.wake(&self.key);
        telemetry::record_current(telemetry::FINISH, "pending");
    }

    /// Deletes the claim so that a retry runs the work again. A transient failure is returned,
    /// and the release retried in the background meanwhile.
    #[allow(clippy::manual_async_fn)] // an `async fn` would keep `self` twice
    pub fn release(mut self) -> impl Future<Output = Result<(), StoreError>> {
        async move {
            if let Some(twin) = self.previous.take() {
                let _ = Box::pin(twin.release()).await;
            }
            self.stop_keep_alive();
            self.finished = true;
            self.namespace.by_ref().count_released();
            let engine = &self.engine;
            let result = {
                let call = std::pin::pin!(engine.inner.store.release(&self.key, self.lease.token));
                engine
                    .timed(StoreOp::Release, self.namespace.by_ref(), call)
                    .await
            };
            engine.inner.waits.wake(&self.key);
            if matches!(&result, Err(error) if error.is_transient()) {
                self.finish_later(recovery::Finish::Release, true);
            }
            if result.is_ok() {
                telemetry::record_current(telemetry::FINISH, "released");
            }
            result
        }
    }

    /// Hands `finish` to the background ([`recovery::retry_finish`]).
    pub(super) fn finish_later(&self, finish: recovery::Finish, failed_before: bool) {
        recovery::retry_finish(
            self.engine.clone(),
            self.namespace.clone(),
            self.key,
            self.lease,
            finish,
            failed_before,
        );
    }

    /// Runs `work` to its end while renewing the lease every `lease / 3` (up to the keep-alive
    /// ceiling) from the caller's own task: the inline twin of the background keep-alive, for a
    /// caller that already drives the work and wants no second task per execution (build its
    /// engine with `with_keep_alive(false, ceiling)`). Renewal stops, and the work goes on, once
    /// the ceiling is reached or the lease was lost. Work that is done at its first poll sets up
    /// no timer. Pass a pinned reference (`work.as_mut()`) to keep a large future in place.
    pub async fn keep_alive_while<F: Future>(&self, work: F) -> F::Output {
        let mut work = std::pin::pin!(work);
        // Work done at its first poll needs no renewal, and no timer; the renewal loop (timers,
        // touch calls) is boxed so that it costs neither space nor time to work that is.
        if let Poll::Ready(output) = poll_once(work.as_mut()).await {
            return output;
        }
        Box::pin(self.renew_while(work)).await
    }

    pub(super) async fn renew_while<F: Future>(&self, mut work: Pin<&mut F>) -> F::Output {
        let config = &self.engine.inner.config;
        let period = (config.lease / 3).max(Duration::from_millis(10));
        let until = Instant::now() + config.keep_alive_ceiling;
        loop {
            if let Either::Left(output) = race(work.as_mut(), tokio::time::sleep(period)).await {
                return output;
            }
            if Instant::now() >= until {
                tracing::warn!(namespace = %self.namespace, key = %self.key, "keep-alive ceiling reached; the lease may be taken over");
                return work.await;
            }
            let call = std::pin::pin!(self.engine.inner.store.touch(TouchRequest {
                key: &self.key,
                token: self.lease.token,
                lease: config.lease
            }));
            let touch = self
                .engine
                .timed(StoreOp::Touch, self.namespace.by_ref(), call);
            match race(work.as_mut(), touch).await {
                Either::Left(output) => return output,
                Either::Right(Err(StoreError::LeaseLost)) => return work.await,
                Either::Right(_) => {}
            }
        }
    }

    pub(super) fn stop_keep_alive(&mut self) {
        if let Some(task) = self.keep_alive.take() {
            task.abort();
        }
    }
}

/// Polls `future` once: its output, or `Pending` (its waker registered).
pub(super) async fn poll_once<F: Future>(future: Pin<&mut F>) -> Poll<F::Output> {
    let mut future = future;
    std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await
}

pub(super) enum Either<A, B> {
    Left(A),
    Right(B),
}

/// Polls `first` and `second` together; the first to finish wins (`first` is kept, `second`
/// dropped).
pub(super) async fn race<A: Future, B: Future>(
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
        self.finish_later(recovery::Finish::Release, false);
    }
}

pub(super) fn spawn_keep_alive<S: Store>(
    engine: Idempotency<S>,
    namespace: Namespace,
    key: StorageKey,
    token: FencingToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let config = &engine.inner.config;
        let period = (config.lease / 3).max(Duration::from_millis(10));
        let until = Instant::now() + config.keep_alive_ceiling;
        loop {
            tokio::time::sleep(period).await;
            if Instant::now() >= until {
                tracing::warn!(namespace = %namespace, key = %key, "keep-alive ceiling reached; the lease may be taken over");
                return;
            }
            let call = std::pin::pin!(engine.inner.store.touch(TouchRequest {
                key: &key,
                token,
                lease: config.lease
            }));
            let touched = engine.timed(StoreOp::Touch, namespace.by_ref(), call).await;
            if let Err(StoreError::LeaseLost) = touched {
                return;
            }
        }
    })
}
