//! The shared conformance suite against a real Redis Cluster of three masters.
//!
//! Nodes come from `REDIS_CLUSTER_URLS` (comma separated, default
//! `redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003`). When they are not
//! reachable and `.ci/redis-cluster.sh` exists, it is run once to start the cluster on the
//! loopback ports; if that fails too, the suite is skipped (or fails under `CI=true`).

use std::sync::OnceLock;

use idempotency_core::StoreError;
use idempotency_redis::{RedisStore, RedisTokenStore, connect_cluster};
use idempotency_test::unavailable;

fn nodes() -> Vec<String> {
    std::env::var("REDIS_CLUSTER_URLS")
        .unwrap_or_else(|_| {
            "redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003".to_owned()
        })
        .split(',')
        .map(|node| node.trim().to_owned())
        .filter(|node| !node.is_empty())
        .collect()
}

/// Starts the cluster with the CI script, once per test binary, when the environment names no
/// cluster of its own.
fn start_cluster_once() -> &'static Result<(), String> {
    static STARTED: OnceLock<Result<(), String>> = OnceLock::new();
    STARTED.get_or_init(|| {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../.ci/redis-cluster.sh");
        if std::env::var_os("REDIS_CLUSTER_URLS").is_some() {
            return Err("REDIS_CLUSTER_URLS is set: not starting a cluster".to_owned());
        }
        let status = std::process::Command::new("bash")
            .arg(script)
            .status()
            .map_err(|error| format!("{script}: {error}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("{script} exited with {status}"))
        }
    })
}

async fn connection() -> Result<idempotency_redis::ClusterConnection, StoreError> {
    match connect_cluster(nodes()).await {
        Ok(connection) => Ok(connection),
        Err(first) => {
            let started = tokio::task::spawn_blocking(start_cluster_once)
                .await
                .map_err(|error| StoreError::Backend(error.to_string().into()))?;
            match started {
                Ok(()) => connect_cluster(nodes()).await,
                Err(reason) => Err(StoreError::Unavailable(format!("{first}; {reason}").into())),
            }
        }
    }
}

idempotency_test::store_conformance_tests!(async {
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
