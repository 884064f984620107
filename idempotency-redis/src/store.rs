//! [`RedisStore`]: the fenced record lifecycle, a native `SET ... NX GET` for the claim and Lua
//! scripts for the compare-and-set steps.

mod ops;
mod settings;

use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::{ConnectionLike, ConnectionManager};
use ::redis::{FromRedisValue, Script, Value};

use super::codec::{self, Existing};
use super::error::{bounded, map_error, millis};
use super::fencing;
use super::held::Held;
use super::unanswered::{Sent, Unanswered};
use super::wake_ups::WakeUps;
use crate::time::unix_micros_now;
use idempotency_core::{
    Claim, ClaimId, ClaimRequest, CompleteRequest, FencingToken, Fingerprint, Outcome, Progress,
    Record, StorageKey, Store, StoreError, TouchRequest,
};

/// Default prefix of every key the store writes.
pub const DEFAULT_KEY_PREFIX: &str = "idempotency:";
/// Default bound on each call to Redis.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// Default bound on how far the clocks of the processes sharing a store may disagree (see
/// [`RedisStore::with_clock_margin`]).
pub const DEFAULT_CLOCK_MARGIN: Duration = Duration::from_secs(1);

pub(super) struct Scripts {
    claim: Script,
    complete: Script,
    settle: Script,
    release: Script,
    touch: Script,
    checkpoint: Script,
    delete: Script,
    pub(super) mark_conflict: Script,
}

/// A [`Store`] on Redis (7.0 or later) or Redis Cluster. Every step is one round trip, except
/// the takeover of a crashed owner's lease (two); `get` is one `MGET` (the record and a run's
/// checkpoints).
///
/// | step | command | round trips |
/// |---|---|---|
/// | claim of a new key | `SET k v NX GET PX lease+grace` | 1 |
/// | claim of a completed key (replay, or mismatch) | the same `SET`: it returns the record, outcome included | 1 |
/// | claim of a key this process completed, or saw completed | `GET`: the record, outcome included; if the key is gone (expired, deleted), then the `SET` as for a new key | 1 (2) |
/// | claim of a live lease (in progress, or mismatch) | the same `SET`: it returns the record | 1 |
/// | claim of a lease at or near its end | the same `SET`, then the claim script (`EVALSHA`): takeover, or in progress | 2 |
/// | complete or touch of a lease this process claimed, on Valkey 8.1 or Redis 8.4 | `SET k v IFEQ <its in-progress record> PX ms`; if the record changed meanwhile (taken over, or renewed by a call whose answer was lost), the step's script decides | 1 (2) |
/// | checkpoint of a run with steps ([`Store::checkpoint`]): the lease renewed, the progress written to `<record key>:p` | one Lua script | 1 |
/// | complete and touch otherwise, release, settle of a pending claim | one Lua script each (`EVALSHA`, loaded once, reloaded on `NOSCRIPT`); complete, settle and release also `PUBLISH` on the record key's channel, inside the script (`SPUBLISH` on a Cluster; pipelined after a native complete) | 1 |
/// | duplicates waiting here for a key in flight ([`with_wake_ups`](Self::with_wake_ups)) | on the listener's connection, `SUBSCRIBE` to the key's channel (`SSUBSCRIBE` on a Cluster, to the key's node) once per key, however many wait, before one read of the record (`get`); one read per message heard, and per [`in_flight_poll`](idempotency_core::Config::in_flight_poll) tick (the fallback); `UNSUBSCRIBE` (`SUNSUBSCRIBE`) when the wait ends | 1 per key + 1 per read |
///
/// - **Records** are one packed string each (an 81-byte binary header, the namespace of at most
///   32 767 bytes, a conflict mark once [`Store::mark_conflict`] set one (one script), the
///   outcome body as raw bytes) under `<prefix>{<key hex>}`; a run's checkpoints under
///   `<prefix>{<key hex>}:p`, stamped with the record's created time and read only while the
///   record is in progress with that time (a takeover keeps them; release and delete remove
///   them; they expire with the lease they were written with). Every command and script
///   touches keys of that one hash tag, so the store runs unchanged on Redis Cluster.
/// - **Duplicates read**: the store remembers (in a fixed table of 16 384 slots, 128 KiB) the
///   keys it completed and the completed records its claims found. Their next claims, the
///   duplicates of a request done, are a `GET`, which the server serves faster than a `SET` that
///   carries a whole record; the record found is decided as the `SET` would have decided it.
///   On a cluster connection that reads from replicas, that `GET` may go to a replica.
/// - **Expiry is native**: a completed record carries its TTL, so
///   [`purge_expired`](Store::purge_expired) has nothing to do and returns 0. An in-progress
///   record lives `lease + grace` ([`with_abandoned_grace`](Self::with_abandoned_grace),
///   [`DEFAULT_ABANDONED_GRACE`](idempotency_core::DEFAULT_ABANDONED_GRACE) by default), so a claim after the lease ended still sees the
///   crashed owner and reports a takeover (`attempt + 1`); after the grace the key is simply
///   gone and the next claim is a first attempt.
/// - **Time**: the server's TTLs decide everything. A completed record is live while its key
///   exists; a lease ends `grace` before its key expires, and only the claim script, reading
///   `PTTL`, takes a lease over. The record also stores the lease end by the clock of the
///   process that wrote it: a claim that finds a live lease answers in progress from that alone
///   (one round trip) while the stored end is more than the clock margin
///   ([`with_clock_margin`](Self::with_clock_margin), 1 s by default) ahead of its own clock, and
///   asks the script otherwise. Clocks further apart than the margin can only make a claim
///   answer "in progress" (or "mismatch") for a lease that has just ended, so the takeover
///   waits up to the excess skew; they never let a live lease be taken over. Created/updated/completed times in a [`Record`] come
///   from the clocks of the processes that made the steps.
/// - **Fencing tokens** come from the claiming process: its clock in microseconds, strictly
///   increasing within the process (`max(last + 1, now)`, and past every token the process saw:
///   its own, a released one, one read from a record, one the script chose). So:
///   - within one process, a later claim of any key never gets a smaller token, across
///     releases, expiry and a Redis restart that lost every record, even if the clock is set back;
///   - a takeover's token is `max(taken-over token + 1, claimant's next token)`, chosen by the
///     script atomically: always strictly greater than the token of the owner it replaces, on
///     any clocks;
///   - across processes, tokens of successive owners of a key are ordered by the processes'
///     clocks: after a release or an expiry, a process whose clock is behind the previous
///     owner's by more than the time in between may get a smaller token. This is no hole in the
///     fencing: a step needs the record's current token exactly, and an owner that released or
///     completed its key has finished with it (an abandoned lease is only forgotten `grace`
///     after its end, an hour by default, far beyond any clock skew).
/// - **Faults**: each call, all its round trips, is bounded by
///   [`with_call_timeout`](Self::with_call_timeout); an
///   unreachable server yields [`StoreError::Unavailable`] or [`StoreError::Timeout`], and the
///   connection ([`ConnectionManager`] or [`ClusterConnection`](crate::ClusterConnection)) reconnects by itself. A call
///   that timed out may still have been applied; leases make that safe.
///
/// Redis 7.0 is required (`SET` with both `NX` and `GET`); Valkey works too. Redis 7 has no
/// compare-and-set command, so complete, touch and release are scripts there. On servers with
/// `SET … IFEQ` (Valkey 8.1, Redis 8.4), the complete and touch of a lease this process claimed
/// are that native command, compared with the exact in-progress record the claim (or a later
/// touch) wrote, which the store keeps until the lease ends; the first such step on a server
/// without `IFEQ` finds out (a syntax error), runs the script, and the store keeps to the
/// scripts from then on.
///
/// ```no_run
/// use idempotency_core::Idempotency;
/// use idempotency_redis::RedisStore;
/// # async fn run() -> Result<(), idempotency_core::StoreError> {
/// let store = RedisStore::connect("redis://127.0.0.1:6379").await?;
/// let engine = Idempotency::new(store.with_key_prefix("shop:idem:"));
/// # let _ = engine; Ok(()) }
/// ```
pub struct RedisStore<C = ConnectionManager> {
    connection: C,
    prefix: Arc<str>,
    call_timeout: Duration,
    grace: Duration,
    clock_margin: Duration,
    pub(super) scripts: Arc<Scripts>,
    pub(super) held: Arc<Held>,
    completed: Arc<idempotency_core::CompletedKeys>,
    unanswered: Arc<Unanswered>,
    /// The command complete and release publish with: `PUBLISH`, or `SPUBLISH` on a Cluster.
    pub(super) publish: &'static str,
    wake_ups: Option<Arc<WakeUps>>,
}

impl<C> RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Deletes the record of `key` if its token is `token` (an operator's fenced delete).
    pub(super) async fn delete_op(
        &self,
        key: &StorageKey,
        token: FencingToken,
    ) -> Result<bool, StoreError> {
        let record_key = self.record_key(key);
        let mut invocation = self.scripts.delete.prepare_invoke();
        invocation
            .key(&record_key)
            .key(codec::progress_key(&record_key))
            .arg(&codec::token_bytes(token)[..])
            .arg(self.publish);
        self.held.forget(key);
        self.completed.forget(key);
        let deleted: i64 = self.invoke(&invocation).await?;
        Ok(deleted == 1)
    }

    /// The Redis key of a record: `<prefix>{<key hex>}`.
    pub fn record_key(&self, key: &StorageKey) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut record_key = String::with_capacity(self.prefix.len() + 2 + 2 * key.0.len());
        record_key.push_str(&self.prefix);
        record_key.push('{');
        for byte in key.0 {
            record_key.push(char::from(HEX[usize::from(byte >> 4)]));
            record_key.push(char::from(HEX[usize::from(byte & 0x0f)]));
        }
        record_key.push('}');
        record_key
    }

    /// `SET k <record> IFEQ <held> PX px`: replaces the held in-progress record of a lease in
    /// one native command (with `publish`, pipelined with the wake-up the complete script
    /// sends, one round trip). `None` (then nothing was written, and the step's script decides) if
    /// the server has no `IFEQ`, or if the record is not the one held: taken over, or renewed
    /// by a call whose answer never came back (a keep-alive dropped mid-call when the work
    /// ended).
    async fn compare_and_set(
        &self,
        key: &StorageKey,
        record: Vec<u8>,
        held: &[u8],
        px: u64,
        publish: bool,
    ) -> Option<Result<(), StoreError>> {
        let record_key = self.record_key(key);
        let mut pipe = ::redis::pipe();
        pipe.cmd("SET")
            .arg(&record_key)
            .arg(record)
            .arg("IFEQ")
            .arg(held)
            .arg("PX")
            .arg(px);
        if publish {
            pipe.cmd(self.publish).arg(&record_key).arg("");
        }
        let mut connection = self.connection.clone();
        // Its error is read here: a syntax error (no `IFEQ`) must be told apart from a failure.
        let answers = pipe
            .ignore_errors()
            .query_async::<Vec<::redis::RedisResult<Value>>>(&mut connection)
            .await;
        let answer = answers.and_then(|answers| {
            answers.into_iter().next().unwrap_or_else(|| {
                Err(::redis::RedisError::from((
                    ::redis::ErrorKind::Client,
                    "no answer to SET IFEQ",
                )))
            })
        });
        Some(match answer {
            Ok(Value::Okay) => {
                self.held.supported(true);
                Ok(())
            }
            Ok(Value::Nil) => {
                self.held.supported(true);
                return None;
            }
            Ok(other) => Err(StoreError::Codec(
                format!("redis: SET IFEQ answered {other:?}").into(),
            )),
            Err(error)
                if error.code() == Some("ERR")
                    && error
                        .detail()
                        .is_some_and(|detail| detail.contains("syntax")) =>
            {
                tracing::debug!("the server has no SET IFEQ; using the scripts");
                self.held.supported(false);
                return None;
            }
            Err(error) => Err(map_error(error, self.call_timeout)),
        })
    }

    /// Decides a claim from the record found under its key (by the claim's `SET`, which then
    /// wrote nothing, or by a `GET`): replay, in progress, mismatch, or, for a lease at or near
    /// its end, whatever the claim script decides by the server's TTL (a second round trip).
    async fn decide(
        &self,
        request: ClaimRequest<'_>,
        record_key: String,
        found: Vec<u8>,
    ) -> Result<Claim, StoreError> {
        let now_us = unix_micros_now();
        let now_ms = now_us / 1000;
        match codec::existing(
            found,
            request.fingerprint,
            now_ms,
            millis(self.clock_margin),
        )? {
            Existing::Decided(claim) => {
                if matches!(claim, Claim::Completed(_)) {
                    self.completed.remember(request.key);
                }
                Ok(claim)
            }
            Existing::LeaseEnding => {
                // A takeover token exceeds the old one (seen by `existing`) and every token this
                // process issued; the script takes the key over with exactly this token.
                let (lease_ms, grace_ms) = (millis(request.lease), millis(self.grace));
                let token = fencing::next_at(now_us);
                let mut invocation = self.scripts.claim.prepare_invoke();
                invocation
                    .key(&record_key)
                    .key(codec::progress_key(&record_key))
                    .arg(&request.fingerprint.0[..])
                    .arg(token)
                    .arg(codec::in_progress_tail(
                        now_ms,
                        lease_ms,
                        grace_ms,
                        codec::Written::of(&request),
                    ))
                    .arg(lease_ms.saturating_add(grace_ms));
                let sent = Sent::new(&self.unanswered, request.claim_id, *request.key, token);
                let reply = self.invoke(&invocation).await?;
                sent.answered();
                codec::claim_reply(reply)
            }
        }
    }

    /// Remembers a key this process completed: its duplicates' claims are a `GET`.
    fn completed(&self, key: &StorageKey, done: Result<(), StoreError>) -> Result<(), StoreError> {
        if done.is_ok() {
            self.completed.remember(key);
        }
        done
    }

    /// Sends one command; a failure as a store error.
    async fn query<T: FromRedisValue>(&self, command: &::redis::Cmd) -> Result<T, StoreError> {
        let mut connection = self.connection.clone();
        let reply = command.query_async(&mut connection).await;
        reply.map_err(|error| map_error(error, self.call_timeout))
    }

    /// Runs one script; a failure as a store error.
    pub(super) async fn invoke<T: FromRedisValue>(
        &self,
        invocation: &::redis::ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        let mut connection = self.connection.clone();
        let reply = invocation.invoke_async(&mut connection).await;
        reply.map_err(|error| map_error(error, self.call_timeout))
    }

    /// Runs an owner-only step; a 0 reply means the token is stale.
    async fn owned_step(
        &self,
        invocation: ::redis::ScriptInvocation<'_>,
    ) -> Result<(), StoreError> {
        let applied: i64 = self.invoke(&invocation).await?;
        if applied == 1 {
            Ok(())
        } else {
            Err(StoreError::LeaseLost)
        }
    }
}

impl<C> Store for RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        bounded(self.call_timeout, self.claim_op(request)).await
    }

    async fn complete(&self, request: CompleteRequest<'_>) -> Result<(), StoreError> {
        bounded(self.call_timeout, self.complete_op(request)).await
    }

    async fn release(&self, key: &StorageKey, token: FencingToken) -> Result<(), StoreError> {
        bounded(self.call_timeout, self.release_op(key, token)).await
    }

    /// Releases the claim with the token it was sent with, if this process sent it and saw no
    /// answer; a claim that did not land, or was completed or taken over since, is left as it
    /// is. The token is forgotten once the store answered (a call that fails or is dropped
    /// leaves it for the next undo).
    async fn undo_claim(&self, key: &StorageKey, claim_id: ClaimId) -> Result<bool, StoreError> {
        let Some(token) = self.unanswered.token(claim_id, key) else {
            return Ok(false);
        };
        let undone = match bounded(
            self.call_timeout,
            self.release_op(key, FencingToken::new(token)),
        )
        .await
        {
            Ok(()) => true,
            Err(StoreError::LeaseLost) => false,
            Err(error) => return Err(error),
        };
        self.unanswered.forget(claim_id);
        Ok(undone)
    }

    async fn touch(&self, request: TouchRequest<'_>) -> Result<(), StoreError> {
        let TouchRequest { key, token, lease } = request;
        bounded(self.call_timeout, self.touch_op(key, token, lease)).await
    }

    /// One script: fenced, the lease renewed, the progress written beside the record.
    async fn checkpoint(
        &self,
        request: TouchRequest<'_>,
        progress: &Progress,
    ) -> Result<(), StoreError> {
        bounded(self.call_timeout, self.checkpoint_op(request, progress)).await
    }

    async fn get(&self, key: &StorageKey) -> Result<Option<Record>, StoreError> {
        bounded(self.call_timeout, self.get_op(key)).await
    }

    /// Each call (all its round trips) ends within the call timeout.
    fn call_bound(&self) -> Option<Duration> {
        Some(self.call_timeout)
    }

    /// Drops the in-progress record held for the lease's native complete.
    fn leave_pending(&self, key: &StorageKey, token: FencingToken) {
        self.held.take(key, token.get());
    }

    async fn mark_conflict(&self, key: &StorageKey) -> Result<bool, StoreError> {
        bounded(self.call_timeout, self.mark_conflict_op(key)).await
    }

    /// One subscription per key on the store's listener (see [`with_wake_ups`](Self::with_wake_ups)).
    async fn wake_ups(&self, key: &StorageKey) -> Option<tokio::sync::watch::Receiver<()>> {
        let wake_ups = self.wake_ups.as_ref()?;
        wake_ups.subscribe(self.record_key(key).into_bytes()).await
    }
    /// One script: the record checked (in progress, this fingerprint) and completed in one
    /// round trip.
    async fn settle(
        &self,
        key: &StorageKey,
        fingerprint: &Fingerprint,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        bounded(
            self.call_timeout,
            self.settle_op(key, fingerprint, outcome, ttl),
        )
        .await
    }

    /// Redis expires records natively; nothing to purge.
    async fn purge_expired(&self, _limit: usize) -> Result<u64, StoreError> {
        Ok(0)
    }
}
