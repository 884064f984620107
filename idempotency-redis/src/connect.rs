//! Opening connections with bounded time-outs and automatic reconnection.

use std::time::Duration;

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::cluster::ClusterClientBuilder;
use ::redis::cluster_async::ClusterConnection;

use super::error::map_error;
use idempotency_core::StoreError;

/// How long a connection attempt may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long one reply may take on a connection opened by [`connect`] or [`connect_client`].
/// The stores' own connections ([`RedisStore::connect`](super::RedisStore::connect),
/// [`RedisTokenStore::connect`](super::RedisTokenStore::connect)) have no such timer: the store
/// bounds every call itself, and a second timer per call costs throughput.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Connects to one Redis server (`redis://host:port/db`) through a [`ConnectionManager`]: one
/// multiplexed connection shared by all callers (clone it freely), re-established in the
/// background after the server went away. Fails if the server cannot be reached now.
pub async fn connect(url: &str) -> Result<ConnectionManager, StoreError> {
    connect_client(open(url)?).await
}

/// Like [`connect`], for a [`Client`](::redis::Client) you configured yourself (TLS, auth,
/// database, protocol).
pub async fn connect_client(client: ::redis::Client) -> Result<ConnectionManager, StoreError> {
    manage(client, Some(RESPONSE_TIMEOUT)).await
}

/// Like [`connect_client`], with no timer on each reply: for a store, which bounds each call
/// (reply, and any wait for a reconnection) itself.
pub(super) async fn connect_store(
    client: ::redis::Client,
) -> Result<ConnectionManager, StoreError> {
    manage(client, None).await
}

pub(super) fn open(url: &str) -> Result<::redis::Client, StoreError> {
    ::redis::Client::open(url).map_err(|error| StoreError::Config(format!("redis url: {error}")))
}

async fn manage(
    client: ::redis::Client,
    response_timeout: Option<Duration>,
) -> Result<ConnectionManager, StoreError> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(response_timeout)
        .set_number_of_retries(2)
        .set_min_delay(Duration::from_millis(50))
        .set_max_delay(Duration::from_millis(500));
    ConnectionManager::new_with_config(client, config)
        .await
        .map_err(|error| map_error(error, CONNECT_TIMEOUT))
}

/// Connects to a Redis Cluster given some of its nodes (`redis://127.0.0.1:7001`, ...). The
/// connection follows slot moves and fail-overs; clone it freely.
pub async fn connect_cluster<I, U>(nodes: I) -> Result<ClusterConnection, StoreError>
where
    I: IntoIterator<Item = U>,
    U: AsRef<str>,
{
    let nodes: Vec<String> = nodes.into_iter().map(|n| n.as_ref().to_owned()).collect();
    let client = ClusterClientBuilder::new(nodes)
        .connection_timeout(CONNECT_TIMEOUT)
        .response_timeout(RESPONSE_TIMEOUT)
        .retries(3)
        .build()
        .map_err(|error| StoreError::Config(format!("redis cluster: {error}")))?;
    client
        .get_async_connection()
        .await
        .map_err(|error| map_error(error, CONNECT_TIMEOUT))
}

/// The constructors of a store type that open its connection (`$store::new(connection)` takes
/// an open one): one Redis server (`connect`, `from_client`) or a Cluster (`connect_cluster`).
/// `RedisStore` and `RedisTokenStore` both have them.
macro_rules! connecting_constructors {
    ($store:ident) => {
        impl $store<::redis::aio::ConnectionManager> {
            /// Connects to one Redis server, as [`connect`](crate::connect) does but with no
            /// timer on each reply at the connection level: the store bounds each call itself
            /// ([`with_call_timeout`](Self::with_call_timeout)). A [`RedisStore`](crate::RedisStore)
            /// so opened also wakes its waiters ([`RedisStore::with_wake_ups`](crate::RedisStore::with_wake_ups)).
            pub async fn connect(url: &str) -> Result<Self, idempotency_core::StoreError> {
                Self::from_client(crate::connect::open(url)?).await
            }

            /// Connects through a [`Client`](::redis::Client) you configured yourself, as
            /// [`connect`](Self::connect) does.
            pub async fn from_client(
                client: ::redis::Client,
            ) -> Result<Self, idempotency_core::StoreError> {
                let connection = crate::connect::connect_store(client.clone()).await?;
                Ok(Self::new(connection).opened_by(&client))
            }
        }

        impl $store<::redis::cluster_async::ClusterConnection> {
            /// Connects to a Redis Cluster through some of its nodes (see
            /// [`connect_cluster`](crate::connect_cluster)). A [`RedisStore`](crate::RedisStore)
            /// so opened also wakes its waiters ([`RedisStore::with_cluster_wake_ups`](crate::RedisStore::with_cluster_wake_ups)).
            pub async fn connect_cluster<I, U>(
                nodes: I,
            ) -> Result<Self, idempotency_core::StoreError>
            where
                I: IntoIterator<Item = U>,
                U: AsRef<str>,
            {
                let nodes: Vec<String> = nodes
                    .into_iter()
                    .map(|node| node.as_ref().to_owned())
                    .collect();
                let connection = crate::connect_cluster(&nodes).await?;
                Ok(Self::new(connection).opened_on(nodes))
            }
        }
    };
}
pub(crate) use connecting_constructors;
