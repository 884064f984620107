//! [`RedisStore`]: the fenced record lifecycle as four Lua scripts.

use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::{ConnectionLike, ConnectionManager};
use ::redis::cluster_async::ClusterConnection;
use ::redis::{Script, Value};

use super::codec;
use super::error::{bounded, millis};
use super::scripts;
use crate::{
    Claim, ClaimRequest, DEFAULT_ABANDONED_GRACE, FencingToken, Outcome, Record, StorageKey, Store,
    StoreError,
};

/// Default prefix of every key the store writes.
pub const DEFAULT_KEY_PREFIX: &str = "idempotency:";
/// Default bound on each call to Redis.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(2);

struct Scripts {
    claim: Script,
    complete: Script,
    release: Script,
    touch: Script,
}

/// A [`Store`] on Redis or Redis Cluster. Every step is one round trip: a Lua script run by
/// `EVALSHA` (loaded once per server, reloaded on `NOSCRIPT`); `get` is one `GET`.
///
/// - **Records** are one packed string each (an 81-byte binary header, the namespace, the
///   outcome body as raw bytes) under `<prefix>{<key hex>}`. The hash tag keeps every key a script touches in
///   one Cluster slot.
/// - **Expiry is native**: a completed record carries its TTL (`PEXPIRE`), so
///   [`purge_expired`](Store::purge_expired) has nothing to do and returns 0. An in-progress
///   record stores its lease end and lives `lease + grace`
///   ([`with_abandoned_grace`](Self::with_abandoned_grace)), so a claim after the lease ended
///   still sees the crashed owner and reports a takeover (`attempt + 1`); after the grace the key
///   is simply gone and the next claim is a first attempt.
/// - **Time** is the Redis server's (`TIME` in the scripts): callers' clocks do not matter.
/// - **Fencing tokens** are `max(previous token + 1, server time in µs)`, so they keep growing
///   across releases, expiry and even a Redis restart that lost every record, assuming the
///   server clock does not jump back (on a Cluster: that the nodes' clocks agree, since a slot
///   may move to another node after a fail-over).
/// - **Faults**: each call is bounded by [`with_call_timeout`](Self::with_call_timeout); an
///   unreachable server yields [`StoreError::Unavailable`] or [`StoreError::Timeout`], and the
///   connection ([`ConnectionManager`] or [`ClusterConnection`]) reconnects by itself. A call
///   that timed out may still have been applied; leases make that safe.
///
/// ```no_run
/// use idempotency_core::{Idempotency, redis::RedisStore};
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
    scripts: Arc<Scripts>,
}

impl<C: Clone> Clone for RedisStore<C> {
    fn clone(&self) -> Self {
        Self {
            connection: self.connection.clone(),
            prefix: Arc::clone(&self.prefix),
            call_timeout: self.call_timeout,
            grace: self.grace,
            scripts: Arc::clone(&self.scripts),
        }
    }
}

impl<C> std::fmt::Debug for RedisStore<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .field("call_timeout", &self.call_timeout)
            .field("abandoned_grace", &self.grace)
            .finish_non_exhaustive()
    }
}

impl RedisStore<ConnectionManager> {
    /// Connects to one Redis server (see [`super::connect`]).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Ok(Self::new(super::connect(url).await?))
    }

    /// Connects through a [`Client`](::redis::Client) you configured yourself (see
    /// [`super::connect_client`]).
    pub async fn from_client(client: ::redis::Client) -> Result<Self, StoreError> {
        Ok(Self::new(super::connect_client(client).await?))
    }
}

impl RedisStore<ClusterConnection> {
    /// Connects to a Redis Cluster through some of its nodes (see [`super::connect_cluster`]).
    pub async fn connect_cluster<I, U>(nodes: I) -> Result<Self, StoreError>
    where
        I: IntoIterator<Item = U>,
        U: AsRef<str>,
    {
        Ok(Self::new(super::connect_cluster(nodes).await?))
    }
}

impl<C> RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A store over an open connection: a [`ConnectionManager`], a
    /// [`MultiplexedConnection`](::redis::aio::MultiplexedConnection) or a [`ClusterConnection`].
    pub fn new(connection: C) -> Self {
        Self {
            connection,
            prefix: Arc::from(DEFAULT_KEY_PREFIX),
            call_timeout: DEFAULT_CALL_TIMEOUT,
            grace: DEFAULT_ABANDONED_GRACE,
            scripts: Arc::new(Scripts {
                claim: Script::new(scripts::CLAIM),
                complete: Script::new(scripts::COMPLETE),
                release: Script::new(scripts::RELEASE),
                touch: Script::new(scripts::TOUCH),
            }),
        }
    }

    /// Prefixes every key (default `idempotency:`), to share a server between services.
    pub fn with_key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Arc::from(prefix.into());
        self
    }

    /// Bounds each call (default 2 s); past it the call fails with [`StoreError::Timeout`].
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// How long an in-progress record outlives its lease (default 1 h), so that a later claim
    /// reports the takeover of a crashed owner and operators can see it.
    pub fn with_abandoned_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// The connection, to share it (for example with a [`super::RedisTokenStore`]).
    pub fn connection(&self) -> &C {
        &self.connection
    }

    /// The Redis key of a record.
    pub fn record_key(&self, key: &StorageKey) -> String {
        format!("{}{{{}}}", self.prefix, key.to_hex())
    }

    fn fence_key(&self, key: &StorageKey) -> String {
        format!("{}{{{}}}:fence", self.prefix, key.to_hex())
    }

    /// Runs an owner-only step; a 0 reply means the token is stale.
    async fn owned_step(
        &self,
        invocation: ::redis::ScriptInvocation<'_>,
    ) -> Result<(), StoreError> {
        let mut connection = self.connection.clone();
        let applied: i64 =
            bounded(self.call_timeout, invocation.invoke_async(&mut connection)).await?;
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
        if request.namespace.len() > usize::from(u16::MAX) {
            return Err(StoreError::Codec(
                "redis: namespaces are limited to 65535 bytes".to_owned(),
            ));
        }
        let mut invocation = self.scripts.claim.prepare_invoke();
        invocation
            .key(self.record_key(request.key))
            .key(self.fence_key(request.key))
            .arg(&request.fingerprint.0[..])
            .arg(request.namespace)
            .arg(millis(request.lease))
            .arg(millis(self.grace));
        let mut connection = self.connection.clone();
        let reply: Value =
            bounded(self.call_timeout, invocation.invoke_async(&mut connection)).await?;
        codec::claim_reply(reply)
    }

    async fn complete(
        &self,
        key: &StorageKey,
        token: FencingToken,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let mut invocation = self.scripts.complete.prepare_invoke();
        invocation
            .key(self.record_key(key))
            .arg(&codec::token_bytes(token)[..])
            .arg(outcome.status)
            .arg(&outcome.body[..])
            .arg(millis(ttl));
        self.owned_step(invocation).await
    }

    async fn release(&self, key: &StorageKey, token: FencingToken) -> Result<(), StoreError> {
        let mut invocation = self.scripts.release.prepare_invoke();
        invocation
            .key(self.record_key(key))
            .key(self.fence_key(key))
            .arg(&codec::token_bytes(token)[..]);
        self.owned_step(invocation).await
    }

    async fn touch(
        &self,
        key: &StorageKey,
        token: FencingToken,
        lease: Duration,
    ) -> Result<(), StoreError> {
        let mut invocation = self.scripts.touch.prepare_invoke();
        invocation
            .key(self.record_key(key))
            .arg(&codec::token_bytes(token)[..])
            .arg(millis(lease))
            .arg(millis(self.grace));
        self.owned_step(invocation).await
    }

    async fn get(&self, key: &StorageKey) -> Result<Option<Record>, StoreError> {
        let mut connection = self.connection.clone();
        let mut command = ::redis::cmd("GET");
        command.arg(self.record_key(key));
        let stored: Option<Vec<u8>> =
            bounded(self.call_timeout, command.query_async(&mut connection)).await?;
        codec::record(key, stored)
    }

    /// Redis expires records natively; nothing to purge.
    async fn purge_expired(&self, _limit: usize) -> Result<u64, StoreError> {
        Ok(0)
    }
}
