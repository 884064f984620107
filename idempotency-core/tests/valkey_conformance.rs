//! The shared conformance suite against Valkey 8.1 or later (`VALKEY_URL`, default
//! `redis://127.0.0.1:7379`; `.ci/valkey.sh` starts one), where the Redis store completes a
//! lease it claimed with the native `SET … IFEQ` rather than a script.
#![cfg(feature = "redis")]

use idempotency_core::redis::RedisStore;
use idempotency_core::testing::unavailable;

fn url() -> String {
    std::env::var("VALKEY_URL").unwrap_or_else(|_| "redis://127.0.0.1:7379".to_owned())
}

idempotency_core::store_conformance_tests!(async {
    match RedisStore::connect(&url()).await {
        Ok(store) => Some(store.with_key_prefix("test:conformance:")),
        Err(error) => unavailable("Valkey", error),
    }
});
