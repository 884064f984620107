//! The operations suite (list, count, fenced and audited actions, reconciliation, purge with
//! archive) on a real Redis server (`REDIS_URL`, default `redis://127.0.0.1:6379`). The Redis
//! Cluster runs it in `redis_cluster.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use idempotency_redis::RedisStore;
use idempotency_test::{operations_suite, unavailable, unique_namespace};

fn url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// On its own prefix, so that the scan reads this test's records only.
#[tokio::test]
async fn operations_on_one_redis_server() {
    let store = match RedisStore::connect(&url()).await {
        Ok(store) => store.with_key_prefix(format!("{}:", unique_namespace("test:ops"))),
        Err(error) => {
            unavailable::<()>("Redis", error);
            return;
        }
    };
    operations_suite(store, 2, true).await;
}
