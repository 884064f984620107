//! The Redis Cluster the Cluster tests run against: its nodes from `REDIS_CLUSTER_URLS` (comma
//! separated, default `redis://127.0.0.1:7001,…7002,…7003`), started once per test binary by
//! `.ci/redis-cluster.sh` (loopback ports) when unreachable and the environment names none.

use std::fmt::Display;
use std::future::Future;
use std::sync::OnceLock;

/// The Cluster's nodes.
pub fn redis_cluster_nodes() -> Vec<String> {
    std::env::var("REDIS_CLUSTER_URLS")
        .unwrap_or_else(|_| {
            "redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003".to_owned()
        })
        .split(',')
        .map(|node| node.trim().to_owned())
        .filter(|node| !node.is_empty())
        .collect()
}

/// Connects to the Cluster with `connect` (given its nodes); when that fails, starts the
/// Cluster with the CI script (once per test binary) and connects again. The error says why
/// neither worked.
pub async fn redis_cluster<T, E, F, Fut>(connect: F) -> Result<T, String>
where
    F: Fn(Vec<String>) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: Display,
{
    let first = match connect(redis_cluster_nodes()).await {
        Ok(connection) => return Ok(connection),
        Err(first) => first,
    };
    let started = tokio::task::spawn_blocking(start_once)
        .await
        .map_err(|error| error.to_string())?;
    match started {
        Ok(()) => connect(redis_cluster_nodes())
            .await
            .map_err(|error| error.to_string()),
        Err(reason) => Err(format!("{first}; {reason}")),
    }
}

/// Starts the Cluster with the CI script, once per test binary, unless the environment names
/// a Cluster of its own.
fn start_once() -> &'static Result<(), String> {
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
