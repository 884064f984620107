//! Redis store and one-time tokens (single node and Cluster).
//!
//! - [`RedisStore`]: the fenced record lifecycle, one round trip per step (a native
//!   `SET ... NX GET` claims or replays, a `GET` replays a key the store saw completed; Lua
//!   scripts run by `EVALSHA` complete, touch and release, and where the server has
//!   `SET … IFEQ` complete and touch are that command; only the takeover of an ended lease
//!   costs a second round trip), records expiring natively.
//! - [`RedisTokenStore`]: one-time tokens against double submits, consumed by one atomic
//!   script.
//! - [`connect`] / [`connect_cluster`]: connections with bounded time-outs that reconnect by
//!   themselves; one connection may serve both stores.
//! - Wake-ups: the complete and release scripts publish on the record key's channel, and a
//!   store's listener connection subscribes to the keys its waiters wait for
//!   ([`RedisStore::with_wake_ups`]), so duplicates waiting in other processes are answered at
//!   once.
//!
//! Every command and script touches one key, or a record's key and its checkpoints' key
//! ([`Store::checkpoint`](idempotency_core::Store::checkpoint)), which carry the record's hash
//! tag (`{<key hex>}`), so both stores run unchanged on Redis Cluster.
//!
//! ```no_run
//! use idempotency_redis::{RedisStore, RedisTokenStore, connect};
//! # async fn run() -> Result<(), idempotency_core::StoreError> {
//! let connection = connect("redis://127.0.0.1:6379").await?;
//! let store = RedisStore::new(connection.clone());
//! let tokens = RedisTokenStore::new(connection);
//! # let _ = (store, tokens); Ok(()) }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

mod codec;
mod conflicts;
mod connect;
mod error;
mod fencing;
mod held;
mod operations;
mod scripts;
mod store;
mod time;
mod tokens;
mod unanswered;
mod wake_ups;

pub use connect::{CONNECT_TIMEOUT, RESPONSE_TIMEOUT, connect, connect_client, connect_cluster};
pub use operations::{NodeAddress, ScanConnection, ScanStep};
pub use store::{DEFAULT_CALL_TIMEOUT, DEFAULT_CLOCK_MARGIN, DEFAULT_KEY_PREFIX, RedisStore};
pub use tokens::{DEFAULT_TOKEN_PREFIX, RedisTokenStore};

/// The Redis client crate this module is built on, for commands of your own.
pub use ::redis as driver;
pub use ::redis::aio::ConnectionManager;
pub use ::redis::cluster_async::ClusterConnection;
