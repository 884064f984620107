//! [`Operations`] on Redis: `SCAN` over every node that holds records, in bounded batches.
//!
//! Records are keyed by digests (`<prefix>{<key hex>}`) and carry their namespace in their
//! value, so a scan reads every record of the prefix and filters after decoding: a count by
//! namespace costs a read of every record. One node is scanned with `SCAN … MATCH
//! <prefix>{* COUNT <batch>`; a Cluster's masters (from `CLUSTER NODES`, in address order) are
//! scanned one after the other, the cursor naming the master and its `SCAN` cursor. The records
//! of one step are read in one round trip, each with its run's checkpoints (`<key>:p`, in its
//! slot): `MGET` on one server, a pipeline of `GET`s sent to the master that was scanned on a
//! Cluster (the keys a master's `SCAN` returns live on it).

use std::time::{Duration, SystemTime};

use ::redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use ::redis::cluster_async::ClusterConnection;
use ::redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use ::redis::{RedisError, Value};

use super::codec;
use super::error::{bounded, map_error};
use super::store::RedisStore;
use idempotency_core::{BoxFuture, FencingToken, StorageKey, StoreError};
use idempotency_operations::{Cursor, Operations, Page, PageRequest, Query};

/// A Cluster node by address: host and port.
pub type NodeAddress = (String, u16);

/// One `SCAN` step.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScanStep {
    /// The keys found.
    pub keys: Vec<String>,
    /// The Cluster master they were found on (`None` on one server).
    pub node: Option<NodeAddress>,
    /// Where the next step starts (`None`: done).
    pub next: Option<Cursor>,
}

/// A connection whose records a [`RedisStore`] can scan: one server ([`ConnectionManager`],
/// [`MultiplexedConnection`]) or every master of a Cluster ([`ClusterConnection`]).
pub trait ScanConnection: ConnectionLike + Clone + Send + Sync + 'static {
    /// One `SCAN` step from `cursor` with `MATCH pattern COUNT count`.
    fn scan_step<'a>(
        &'a self,
        pattern: &'a str,
        cursor: &'a Cursor,
        count: usize,
    ) -> BoxFuture<'a, Result<ScanStep, RedisError>>;

    /// The values of `keys` (`None` for a key gone since the scan), in order, read in one
    /// round trip where the keys live on one `node` (as one step's do). Never asked for no
    /// keys.
    fn values<'a>(
        &'a self,
        keys: &'a [String],
        node: Option<&'a NodeAddress>,
    ) -> BoxFuture<'a, Result<Vec<Option<Vec<u8>>>, RedisError>>;
}

fn scan_command(pattern: &str, cursor: u64, count: usize) -> ::redis::Cmd {
    let mut command = ::redis::cmd("SCAN");
    command
        .arg(cursor)
        .arg("MATCH")
        .arg(pattern)
        .arg("COUNT")
        .arg(count.max(1));
    command
}

/// A `SCAN` reply: the next cursor (0 at the end) and the keys.
fn scan_reply(reply: Value) -> Result<(u64, Vec<String>), RedisError> {
    ::redis::from_redis_value::<(u64, Vec<String>)>(reply).map_err(RedisError::from)
}

fn bad_cursor(cursor: &Cursor) -> RedisError {
    RedisError::from((
        ::redis::ErrorKind::Client,
        "not a cursor of this store",
        cursor.to_string(),
    ))
}

/// A single server's cursor: `SCAN`'s own.
fn node_cursor(cursor: &Cursor) -> Result<u64, RedisError> {
    if cursor.is_start() {
        return Ok(0);
    }
    cursor.as_str().parse().map_err(|_| bad_cursor(cursor))
}

/// One server: `SCAN`, then `MGET` (one round trip each).
macro_rules! single_node {
    ($connection:ty) => {
        impl ScanConnection for $connection {
            fn scan_step<'a>(
                &'a self,
                pattern: &'a str,
                cursor: &'a Cursor,
                count: usize,
            ) -> BoxFuture<'a, Result<ScanStep, RedisError>> {
                Box::pin(async move {
                    let at = node_cursor(cursor)?;
                    let reply: Value = scan_command(pattern, at, count)
                        .query_async(&mut self.clone())
                        .await?;
                    let (next, keys) = scan_reply(reply)?;
                    Ok(ScanStep {
                        keys,
                        node: None,
                        next: (next != 0).then(|| Cursor::from_text(next.to_string())),
                    })
                })
            }

            fn values<'a>(
                &'a self,
                keys: &'a [String],
                _node: Option<&'a NodeAddress>,
            ) -> BoxFuture<'a, Result<Vec<Option<Vec<u8>>>, RedisError>> {
                Box::pin(async move {
                    ::redis::cmd("MGET")
                        .arg(keys)
                        .query_async(&mut self.clone())
                        .await
                })
            }
        }
    };
}

single_node!(ConnectionManager);
single_node!(MultiplexedConnection);

/// The masters that serve slots, as `(host, port)`, in address order.
async fn masters(connection: &ClusterConnection) -> Result<Vec<NodeAddress>, RedisError> {
    let nodes: String = ::redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut connection.clone())
        .await?;
    let mut masters: Vec<NodeAddress> = nodes
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let flags = fields.get(2)?;
            // A master that serves at least one slot range, and is not failing.
            if !flags.contains("master") || flags.contains("fail") || fields.len() <= 8 {
                return None;
            }
            let address = fields.get(1)?.split(['@', ',']).next()?;
            let (host, port) = address.rsplit_once(':')?;
            Some((host.to_owned(), port.parse().ok()?))
        })
        .collect();
    masters.sort();
    Ok(masters)
}

/// A Cluster's cursor: `<master index>:<its SCAN cursor>`.
fn cluster_cursor(cursor: &Cursor) -> Result<(usize, u64), RedisError> {
    if cursor.is_start() {
        return Ok((0, 0));
    }
    let (node, at) = cursor
        .as_str()
        .split_once(':')
        .ok_or_else(|| bad_cursor(cursor))?;
    Ok((
        node.parse().map_err(|_| bad_cursor(cursor))?,
        at.parse().map_err(|_| bad_cursor(cursor))?,
    ))
}

/// Every master in turn: `SCAN` routed to it by address; the values of its keys by one
/// pipeline of `GET`s routed to it too (the keys of a batch lie in many slots, all served by
/// that master, so `MGET` would need one call per slot).
impl ScanConnection for ClusterConnection {
    fn scan_step<'a>(
        &'a self,
        pattern: &'a str,
        cursor: &'a Cursor,
        count: usize,
    ) -> BoxFuture<'a, Result<ScanStep, RedisError>> {
        Box::pin(async move {
            let (node, at) = cluster_cursor(cursor)?;
            let masters = masters(self).await?;
            let Some((host, port)) = masters.get(node).cloned() else {
                return Ok(ScanStep::default());
            };
            let address = (host.clone(), port);
            let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port });
            let reply = self
                .clone()
                .route_command(scan_command(pattern, at, count), routing)
                .await?;
            let (next, keys) = scan_reply(reply)?;
            let next = if next != 0 {
                Some(format!("{node}:{next}"))
            } else if node + 1 < masters.len() {
                Some(format!("{}:0", node + 1))
            } else {
                None
            };
            Ok(ScanStep {
                keys,
                node: Some(address),
                next: next.map(Cursor::from_text),
            })
        })
    }

    fn values<'a>(
        &'a self,
        keys: &'a [String],
        node: Option<&'a NodeAddress>,
    ) -> BoxFuture<'a, Result<Vec<Option<Vec<u8>>>, RedisError>> {
        Box::pin(async move {
            if let Some((host, port)) = node {
                let mut pipeline = ::redis::pipe();
                for key in keys {
                    pipeline.get(key);
                }
                let route = SingleNodeRoutingInfo::ByAddress {
                    host: host.clone(),
                    port: *port,
                };
                let read = self
                    .clone()
                    .route_pipeline(pipeline, 0, keys.len(), route)
                    .await
                    .and_then(|replies| {
                        replies
                            .into_iter()
                            .map(::redis::from_redis_value::<Option<Vec<u8>>>)
                            .collect::<Result<Vec<_>, _>>()
                            .map_err(RedisError::from)
                    });
                match read {
                    Ok(values) if values.len() == keys.len() => return Ok(values),
                    // A slot moved since the scan (a resharding): each key is read where it
                    // lives now.
                    Ok(_) => {}
                    Err(error) if error.is_cluster_error() => {}
                    Err(error) => return Err(error),
                }
            }
            let mut values = Vec::with_capacity(keys.len());
            for key in keys {
                values.push(
                    ::redis::cmd("GET")
                        .arg(key)
                        .query_async(&mut self.clone())
                        .await?,
                );
            }
            Ok(values)
        })
    }
}

/// `pattern` with Redis glob characters escaped, so a prefix matches only itself.
fn glob_escaped(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

impl<C: ScanConnection> RedisStore<C> {
    /// The storage key of a record key `<prefix>{<hex>}`, if it is one.
    fn storage_key_of(&self, record_key: &str) -> Option<StorageKey> {
        let hex = record_key
            .strip_prefix(self.prefix())?
            .strip_prefix('{')?
            .strip_suffix('}')?;
        StorageKey::from_hex(hex)
    }

    /// One page of the records whose storage key's hex starts with `hex` (every record: an
    /// empty `hex`) matching `query`.
    async fn page_op(
        &self,
        query: &Query,
        cursor: &Cursor,
        batch: usize,
        hex: &str,
    ) -> Result<Page, StoreError> {
        let timeout = self.call_timeout();
        let pattern = format!("{}{{{}*}}", glob_escaped(self.prefix()), glob_escaped(hex));
        let connection = self.connection();
        let ScanStep { keys, node, next } = connection
            .scan_step(&pattern, cursor, batch)
            .await
            .map_err(|error| map_error(error, timeout))?;
        let keys: Vec<(String, StorageKey)> = keys
            .into_iter()
            .filter_map(|key| self.storage_key_of(&key).map(|storage| (key, storage)))
            .collect();
        // Each record with its run's checkpoints, in the same read (one slot each, one node).
        let names: Vec<String> = keys
            .iter()
            .map(|(key, _)| key.clone())
            .chain(keys.iter().map(|(key, _)| codec::progress_key(key)))
            .collect();
        let mut values = if names.is_empty() {
            Vec::new()
        } else {
            connection
                .values(&names, node.as_ref())
                .await
                .map_err(|error| map_error(error, timeout))?
        };
        let now = SystemTime::now();
        let mut records = Vec::new();
        let progress = values.split_off(keys.len().min(values.len()));
        for (((_, key), value), progress) in keys.iter().zip(values).zip(progress) {
            if let Some(record) = codec::record_with_progress(key, value, progress)?
                && query.matches(&record, now)
            {
                records.push(record);
            }
        }
        Ok(Page {
            records,
            examined: keys.len() as u64,
            next,
        })
    }
}

/// Each `SCAN` step is bounded by the store's call timeout, and so is each batch's read;
/// `SCAN` may return a key twice across a scan (a rehash): lists and counts can then hold a
/// record twice, actions are fenced anyway. Purge deletes only abandoned records past the
/// grace that Redis has not expired yet (none, normally: records expire natively).
impl<C: ScanConnection> Operations for RedisStore<C> {
    fn page<'a>(&'a self, request: PageRequest<'a>) -> BoxFuture<'a, Result<Page, StoreError>> {
        let (query, cursor, batch) = (request.query, request.cursor, request.batch);
        // A batch is two round trips (three on a Cluster, with `CLUSTER NODES`), 1 + `batch`
        // when a Cluster's slots moved meanwhile: bounded by a call timeout per round trip it
        // may take.
        let limit = self.call_timeout().saturating_mul(2 + batch as u32);
        Box::pin(bounded(limit, self.page_op(query, cursor, batch, "")))
    }

    /// A scan of the keys `<prefix>{<hex>*}` only: each step reads the values of the keys
    /// that match, not of every record.
    fn by_key_prefix<'a>(
        &'a self,
        hex: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<idempotency_core::Record>, StoreError>> {
        Box::pin(async move {
            let query = Query::all();
            let batch = idempotency_operations::DEFAULT_BATCH;
            let bound = self.call_timeout().saturating_mul(2 + batch as u32);
            let mut cursor = Cursor::start();
            let mut found = Vec::new();
            loop {
                let page = bounded(bound, self.page_op(&query, &cursor, batch, hex)).await?;
                found.extend(page.records);
                match page.next {
                    Some(next) if found.len() < limit => cursor = next,
                    _ => break,
                }
            }
            found.truncate(limit);
            Ok(found)
        })
    }

    fn delete_fenced<'a>(
        &'a self,
        key: &'a StorageKey,
        token: FencingToken,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(bounded(self.call_timeout(), self.delete_op(key, token)))
    }

    fn abandoned_grace(&self) -> Duration {
        self.grace()
    }

    fn source(&self) -> String {
        format!("keys under {}", self.prefix())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_match_only_themselves() {
        assert_eq!(glob_escaped("idempotency:"), "idempotency:");
        assert_eq!(glob_escaped("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }

    #[test]
    fn cluster_cursors_round_trip() {
        assert_eq!(cluster_cursor(&Cursor::start()).ok(), Some((0, 0)));
        assert_eq!(
            cluster_cursor(&Cursor::from_text("2:17")).ok(),
            Some((2, 17))
        );
        assert!(cluster_cursor(&Cursor::from_text("x")).is_err());
        assert!(node_cursor(&Cursor::from_text("-1")).is_err());
    }
}
