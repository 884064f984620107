//! The store's steps as Redis commands and scripts, each of one or more round trips.

use std::time::{Duration, SystemTime};

use ::redis::aio::ConnectionLike;

use crate::codec::{self};
use crate::error::millis;
use crate::fencing;
use crate::time::{unix_micros_now, unix_millis};
use crate::unanswered::Sent;
use idempotency_core::{
    Claim, ClaimRequest, CompleteRequest, FencingToken, Fingerprint, Lease, Outcome, Progress,
    Record, StorageKey, StoreError, TouchRequest,
};

use super::RedisStore;

/// The store's operations, each of one or more round trips; [`Store`] bounds each as a whole.
impl<C> RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    pub(super) async fn claim_op(&self, request: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        if codec::Written::of(&request).len() > codec::MAX_NAMESPACE {
            return Err(StoreError::Codec(
                format!(
                    "redis: namespaces are limited to {} bytes",
                    codec::MAX_NAMESPACE - 3
                )
                .into(),
            ));
        }
        let record_key = self.record_key(request.key);
        if self.completed.knows(request.key) {
            let mut command = ::redis::cmd("GET");
            command.arg(&record_key);
            let found: Option<Vec<u8>> = self.query(&command).await?;
            match found {
                Some(found) => return self.decide(request, record_key, found).await,
                // Expired or deleted: claimed with the `SET` below.
                None => self.completed.forget(request.key),
            }
        }
        let (lease_ms, grace_ms) = (millis(request.lease), millis(self.grace));
        let now_us = unix_micros_now();
        let token = fencing::next_at(now_us);
        let record = codec::in_progress(
            request.fingerprint,
            token,
            now_us / 1000,
            lease_ms,
            grace_ms,
            codec::Written::of(&request),
        );
        let mut command = ::redis::Cmd::with_capacity(7, 32 + record_key.len() + record.len());
        command
            .arg("SET")
            .arg(&record_key)
            .arg(&record[..])
            .arg("NX")
            .arg("GET")
            .arg("PX")
            .arg(lease_ms.saturating_add(grace_ms));
        let sent = Sent::new(&self.unanswered, request.claim_id, *request.key, token);
        let found: Option<Vec<u8>> = self.query(&command).await?;
        sent.answered();
        let Some(found) = found else {
            self.held.hold(request.key, token, record);
            return Ok(Claim::Acquired(Lease {
                token: FencingToken::new(token),
                attempt: 1,
                took_over: false,
            }));
        };
        self.decide(request, record_key, found).await
    }

    pub(super) async fn complete_op(&self, request: CompleteRequest<'_>) -> Result<(), StoreError> {
        let CompleteRequest {
            key,
            token,
            outcome,
            ttl,
        } = request;
        let ttl_ms = millis(ttl);
        let now_ms = unix_millis(SystemTime::now());
        let fields = codec::completed_fields(now_ms, ttl_ms, outcome.status);
        if self.held.native()
            && let Some(in_progress) = self.held.take(key, token.get())
        {
            let completed = codec::completed_from(&in_progress, &fields, &outcome.body);
            if let Some(done) = self
                .compare_and_set(key, completed, &in_progress, ttl_ms, true)
                .await
            {
                return self.completed(key, done);
            }
        }
        let mut invocation = self.scripts.complete.prepare_invoke();
        invocation
            .key(self.record_key(key))
            .arg(&codec::token_bytes(token)[..])
            .arg(&fields[..])
            .arg(&outcome.body[..])
            .arg(ttl_ms)
            .arg(self.publish);
        let done = self.owned_step(invocation).await;
        self.completed(key, done)
    }

    pub(super) async fn settle_op(
        &self,
        key: &StorageKey,
        fingerprint: &Fingerprint,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let ttl_ms = millis(ttl);
        let fields =
            codec::completed_fields(unix_millis(SystemTime::now()), ttl_ms, outcome.status);
        let mut invocation = self.scripts.settle.prepare_invoke();
        invocation
            .key(self.record_key(key))
            .arg(&fingerprint.0[..])
            .arg(&fields[..])
            .arg(&outcome.body[..])
            .arg(ttl_ms)
            .arg(self.publish);
        let settled: i64 = self.invoke(&invocation).await?;
        // The in-progress record this process may hold for it is stale either way.
        self.held.forget(key);
        if settled == 1 {
            self.completed.remember(key);
        }
        Ok(settled == 1)
    }

    pub(super) async fn release_op(
        &self,
        key: &StorageKey,
        token: FencingToken,
    ) -> Result<(), StoreError> {
        let record_key = self.record_key(key);
        let mut invocation = self.scripts.release.prepare_invoke();
        invocation
            .key(&record_key)
            .key(codec::progress_key(&record_key))
            .arg(&codec::token_bytes(token)[..])
            .arg(self.publish);
        // The record and its token go (no fence key is kept): this process's later tokens still
        // exceed it, even if the token was not issued here.
        fencing::observe(token.get());
        self.held.forget(key);
        self.owned_step(invocation).await
    }

    pub(super) async fn touch_op(
        &self,
        key: &StorageKey,
        token: FencingToken,
        lease: Duration,
    ) -> Result<(), StoreError> {
        let (lease_ms, grace_ms) = (millis(lease), millis(self.grace));
        let now_ms = unix_millis(SystemTime::now());
        let fields = codec::lease_fields(now_ms, lease_ms, grace_ms);
        let px = lease_ms.saturating_add(grace_ms);
        if self.held.native()
            && let Some(in_progress) = self.held.get(key, token.get())
        {
            let renewed = codec::renewed(&in_progress, &fields);
            match self
                .compare_and_set(key, renewed, &in_progress, px, false)
                .await
            {
                Some(Ok(())) => {
                    self.held.touched(key, token.get(), &fields);
                    return Ok(());
                }
                Some(Err(error)) => {
                    self.held.forget(key);
                    return Err(error);
                }
                None => {}
            }
        }
        self.renew_scripted(key, token, &fields, px, None).await
    }

    pub(super) async fn checkpoint_op(
        &self,
        request: TouchRequest<'_>,
        progress: &Progress,
    ) -> Result<(), StoreError> {
        let TouchRequest { key, token, lease } = request;
        // A lease of zero ends now (a paused run, resumable at once), not in a millisecond.
        let lease_ms = if lease.is_zero() { 0 } else { millis(lease) };
        let grace_ms = millis(self.grace);
        let fields = codec::lease_fields(unix_millis(SystemTime::now()), lease_ms, grace_ms);
        let px = lease_ms.saturating_add(grace_ms);
        self.renew_scripted(key, token, &fields, px, Some(progress))
            .await
    }

    /// Renews the lease by script, with `progress` written beside the record if given (the
    /// checkpoint script, else the touch script).
    async fn renew_scripted(
        &self,
        key: &StorageKey,
        token: FencingToken,
        fields: &[u8; 24],
        px: u64,
        progress: Option<&Progress>,
    ) -> Result<(), StoreError> {
        let record_key = self.record_key(key);
        let script = match progress {
            Some(_) => &self.scripts.checkpoint,
            None => &self.scripts.touch,
        };
        let mut invocation = script.prepare_invoke();
        invocation.key(&record_key);
        if progress.is_some() {
            invocation.key(codec::progress_key(&record_key));
        }
        invocation
            .arg(&codec::token_bytes(token)[..])
            .arg(&fields[..])
            .arg(px);
        if let Some(progress) = progress {
            invocation.arg(progress.encode());
        }
        let renewed = self.owned_step(invocation).await;
        match &renewed {
            Ok(()) => self.held.touched(key, token.get(), fields),
            // Lost, or perhaps applied (a time-out): the record is no longer known exactly.
            Err(_) => self.held.forget(key),
        }
        renewed
    }

    /// The record and its checkpoints in one `MGET` (one slot: the same hash tag).
    pub(super) async fn get_op(&self, key: &StorageKey) -> Result<Option<Record>, StoreError> {
        let record_key = self.record_key(key);
        let mut command = ::redis::cmd("MGET");
        command
            .arg(&record_key)
            .arg(codec::progress_key(&record_key));
        let (stored, progress): (Option<Vec<u8>>, Option<Vec<u8>>) = self.query(&command).await?;
        codec::record_with_progress(key, stored, progress)
    }
}
