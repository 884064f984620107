//! Building a [`RedisStore`]: its constructor over a connection, wake-ups, and settings.

use std::sync::Arc;
use std::time::Duration;

use ::redis::Script;
use ::redis::aio::ConnectionLike;
use idempotency_core::DEFAULT_ABANDONED_GRACE;

use super::{DEFAULT_CALL_TIMEOUT, DEFAULT_CLOCK_MARGIN, DEFAULT_KEY_PREFIX, RedisStore, Scripts};
use crate::held::Held;
use crate::scripts;
use crate::wake_ups::WakeUps;

impl<C: Clone> Clone for RedisStore<C> {
    fn clone(&self) -> Self {
        Self {
            connection: self.connection.clone(),
            prefix: Arc::clone(&self.prefix),
            call_timeout: self.call_timeout,
            grace: self.grace,
            clock_margin: self.clock_margin,
            scripts: Arc::clone(&self.scripts),
            held: Arc::clone(&self.held),
            completed: Arc::clone(&self.completed),
            unanswered: Arc::clone(&self.unanswered),
            publish: self.publish,
            wake_ups: self.wake_ups.clone(),
        }
    }
}

impl<C> std::fmt::Debug for RedisStore<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .field("call_timeout", &self.call_timeout)
            .field("abandoned_grace", &self.grace)
            .field("clock_margin", &self.clock_margin)
            .field("wake_ups", &self.wake_ups.is_some())
            .finish_non_exhaustive()
    }
}

crate::connect::connecting_constructors!(RedisStore);

impl RedisStore<::redis::cluster_async::ClusterConnection> {
    /// Wakes the duplicates waiting here as [`with_wake_ups`](RedisStore::with_wake_ups) does,
    /// on a Cluster: one listener connection per node (through `nodes`, in RESP3) subscribes
    /// with `SSUBSCRIBE` to the channels of the keys with waiters here, each on the node of
    /// its key's slot, where the scripts `SPUBLISH`. [`connect_cluster`](RedisStore::connect_cluster)
    /// sets it up already.
    pub fn with_cluster_wake_ups<I, U>(self, nodes: I) -> Self
    where
        I: IntoIterator<Item = U>,
        U: AsRef<str>,
    {
        self.opened_on(
            nodes
                .into_iter()
                .map(|node| node.as_ref().to_owned())
                .collect(),
        )
    }
}

impl<C> RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A store over an open connection: a [`ConnectionManager`](::redis::aio::ConnectionManager), a
    /// [`MultiplexedConnection`](::redis::aio::MultiplexedConnection) or a [`ClusterConnection`](crate::ClusterConnection).
    pub fn new(connection: C) -> Self {
        Self {
            connection,
            prefix: Arc::from(DEFAULT_KEY_PREFIX),
            call_timeout: DEFAULT_CALL_TIMEOUT,
            grace: DEFAULT_ABANDONED_GRACE,
            clock_margin: DEFAULT_CLOCK_MARGIN,
            scripts: Arc::new(Scripts {
                claim: Script::new(scripts::CLAIM),
                complete: Script::new(scripts::COMPLETE),
                settle: Script::new(scripts::SETTLE),
                release: Script::new(scripts::RELEASE),
                touch: Script::new(scripts::TOUCH),
                checkpoint: Script::new(scripts::CHECKPOINT),
                delete: Script::new(scripts::DELETE),
                mark_conflict: Script::new(scripts::MARK_CONFLICT),
            }),
            held: Arc::new(Held::new()),
            completed: Arc::new(idempotency_core::CompletedKeys::new()),
            unanswered: Arc::default(),
            publish: if std::any::TypeId::of::<C>()
                == std::any::TypeId::of::<::redis::cluster_async::ClusterConnection>()
            {
                "SPUBLISH"
            } else {
                "PUBLISH"
            },
            wake_ups: None,
        }
    }

    /// Wakes the duplicates waiting here for a key in flight as soon as any process completes
    /// or releases it: one listener connection of `client` (in RESP3) subscribes to the keys
    /// that have waiters here, one subscription per key. The stores that open their own
    /// connection ([`connect`](RedisStore::connect), [`from_client`](RedisStore::from_client))
    /// have it already; without it, waiters poll
    /// ([`Config::in_flight_poll`](idempotency_core::Config::in_flight_poll)). Not on a Cluster
    /// connection: its waiters poll.
    pub fn with_wake_ups(mut self, client: &::redis::Client) -> Self {
        if self.publish != "PUBLISH" {
            tracing::warn!(
                "no wake-ups from one server for a Cluster store: see with_cluster_wake_ups"
            );
            return self;
        }
        match WakeUps::new(client, self.call_timeout) {
            Ok(wake_ups) => self.wake_ups = Some(Arc::new(wake_ups)),
            Err(error) => tracing::warn!(%error, "no wake-ups: waiters poll"),
        }
        self
    }

    /// A store opened by its constructors: it listens for wake-ups on `client`.
    pub(crate) fn opened_by(self, client: &::redis::Client) -> Self {
        self.with_wake_ups(client)
    }

    /// A store opened by its Cluster constructor: it listens for wake-ups on the Cluster.
    pub(crate) fn opened_on(self, nodes: Vec<String>) -> Self {
        let wake_ups = WakeUps::cluster(nodes, self.call_timeout);
        Self {
            wake_ups: Some(Arc::new(wake_ups)),
            ..self
        }
    }

    /// Prefixes every key (default `idempotency:`), to share a server between services.
    pub fn with_key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Arc::from(prefix.into());
        self
    }

    /// Bounds each call, all its round trips (default 2 s); past it the call fails with
    /// [`StoreError::Timeout`](idempotency_core::StoreError::Timeout). An engine whose store
    /// timeout is at least this sets no timer of its own on the store's calls
    /// ([`Store::call_bound`](idempotency_core::Store::call_bound)).
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

    /// How far apart the clocks of the processes sharing this store may be (default 1 s).
    ///
    /// A claim that finds a live lease answers "in progress" from the record alone (one round
    /// trip) while the lease end the owner stored, by the owner's clock, is more than this
    /// ahead of the local clock; nearer its end, the claim script decides by the server's TTL
    /// (a second round trip). A larger margin costs the second round trip earlier in a lease;
    /// clocks further apart than the margin delay the takeover of an ended lease by at most
    /// the excess. The margin never lets a live lease be taken over.
    pub fn with_clock_margin(mut self, margin: Duration) -> Self {
        self.clock_margin = margin;
        self
    }

    /// The connection, to share it (for example with a
    /// [`RedisTokenStore`](crate::RedisTokenStore)).
    pub fn connection(&self) -> &C {
        &self.connection
    }

    /// The key prefix.
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The bound on each call.
    pub(crate) fn call_timeout(&self) -> Duration {
        self.call_timeout
    }

    /// How long an in-progress record outlives its lease.
    pub(crate) fn grace(&self) -> Duration {
        self.grace
    }
}
