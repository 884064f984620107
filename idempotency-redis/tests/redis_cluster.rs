//! The shared conformance suite against a real Redis Cluster of three masters.
//!
//! Nodes come from `REDIS_CLUSTER_URLS` (comma separated, default
//! `redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003`). When they are not
//! reachable and `.ci/redis-cluster.sh` exists, it is run once to start the cluster on the
//! loopback ports; if that fails too, the suite is skipped (or fails under `CI=true`).

use idempotency_redis::{RedisStore, RedisTokenStore, connect_cluster};
use idempotency_test::unavailable;

fn nodes() -> Vec<String> {
    idempotency_test::redis_cluster_nodes()
}

async fn connection() -> Result<idempotency_redis::ClusterConnection, String> {
    idempotency_test::redis_cluster(connect_cluster).await
}

idempotency_test::store_conformance_tests!(async {
    match connection().await {
        Ok(connection) => Some(RedisStore::new(connection).with_key_prefix("test:cluster:")),
        Err(error) => unavailable("Redis Cluster", error),
    }
});

idempotency_test::checkpoint_conformance_tests!(async {
    match connection().await {
        Ok(connection) => Some(RedisStore::new(connection).with_key_prefix("test:cluster:")),
        Err(error) => unavailable("Redis Cluster", error),
    }
});

idempotency_test::token_conformance_tests!(async {
    match connection().await {
        Ok(connection) => {
            Some(RedisTokenStore::new(connection).with_key_prefix("test:cluster:token:"))
        }
        Err(error) => unavailable("Redis Cluster", error),
    }
});

/// The suite's keys really are spread over the three masters: each owns slots.
#[tokio::test]
async fn cluster_has_three_masters() {
    let Some(mut connection) = (match connection().await {
        Ok(connection) => Some(connection),
        Err(error) => unavailable("Redis Cluster", error),
    }) else {
        return;
    };
    let nodes: String = idempotency_redis::driver::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut connection)
        .await
        .expect("CLUSTER NODES");
    let masters = nodes
        .lines()
        .filter(|line| {
            line.split(' ')
                .nth(2)
                .is_some_and(|flags| flags.contains("master"))
        })
        .filter(|line| line.split(' ').count() > 8) // owns at least one slot range
        .count();
    assert!(masters >= 3, "expected 3 masters with slots, got:\n{nodes}");
}

/// The operations suite on the cluster: its scans visit every master (on its own prefix, the
/// suite's records land in slots of all three).
#[tokio::test]
async fn operations_on_every_master() {
    let Some(connection) = (match connection().await {
        Ok(connection) => Some(connection),
        Err(error) => unavailable("Redis Cluster", error),
    }) else {
        return;
    };
    let prefix = format!(
        "{}:",
        idempotency_test::unique_namespace("test:cluster:ops")
    );
    let store = RedisStore::new(connection).with_key_prefix(prefix);
    idempotency_test::operations_suite(store, 2, true).await;
}

/// How many subscribers the shard channel `channel` has on the masters (`PUBSUB SHARDNUMSUB`
/// asked of each node, summed: only the node of the channel's slot has any).
#[allow(clippy::unwrap_used)]
async fn shard_subscribers(channel: &str) -> i64 {
    let mut total = 0;
    for node in nodes() {
        let client = idempotency_redis::driver::Client::open(node.as_str()).unwrap();
        let mut connection = client.get_multiplexed_async_connection().await.unwrap();
        let (_, count): (String, i64) = idempotency_redis::driver::cmd("PUBSUB")
            .arg("SHARDNUMSUB")
            .arg(channel)
            .query_async(&mut connection)
            .await
            .unwrap();
        total += count;
    }
    total
}

/// On a Cluster, a duplicate waiting in one instance is subscribed (`SSUBSCRIBE`, on the node
/// of its key's slot) while another instance runs the key, answered when it completes long
/// before its 400 s poll, and unsubscribed after; for keys on every master.
#[tokio::test]
#[allow(clippy::unwrap_used, clippy::expect_used)]
async fn waiters_elsewhere_are_woken_on_every_master() {
    use std::time::Duration;

    use idempotency_core::{
        Decision, Fingerprint, Idempotency, InFlightPolicy, Namespace, Outcome,
    };

    if let Err(error) = connection().await {
        unavailable::<()>("Redis Cluster", error);
        return;
    }
    let prefix = "test:cluster:wake-ups:";
    let store = || async {
        RedisStore::connect_cluster(nodes())
            .await
            .unwrap()
            .with_key_prefix(prefix)
    };
    let a = Idempotency::new(store().await).with_keep_alive(false, Duration::from_secs(600));
    let b = Idempotency::new(store().await).with_in_flight_poll(Duration::from_secs(400));
    let scope = Namespace::new("wake-ups").scope();
    let fingerprint = Fingerprint::of_bytes(b"order 42");
    for _ in 0..6 {
        let key = idempotency_test::unique_key();
        let channel = b.store().record_key(&key);
        let claim = a.claim(&scope, key, &fingerprint, InFlightPolicy::Reject);
        let Decision::Execute(execution) = claim.await.unwrap() else {
            panic!("a new key is claimed");
        };
        let waiting = tokio::spawn({
            let (b, scope) = (b.clone(), scope.clone());
            async move {
                let wait = InFlightPolicy::wait(Duration::from_secs(60));
                b.claim(&scope, key, &fingerprint, wait).await.unwrap()
            }
        });
        let subscribed = async {
            while shard_subscribers(&channel).await != 1 {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), subscribed)
            .await
            .expect("the waiting instance subscribes on the key's node");
        execution.complete(Outcome::new(201, "paid")).await.unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("answered long before the poll")
            .unwrap();
        match answer {
            Decision::Replay(outcome) => assert_eq!(&outcome.body[..], b"paid"),
            other => panic!("the owner's outcome, got {other:?}"),
        }
        let unsubscribed = async {
            while shard_subscribers(&channel).await != 0 {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), unsubscribed)
            .await
            .expect("the wait's end unsubscribes");
    }
}
