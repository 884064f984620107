//! The shared conformance suite against a real Redis server (`REDIS_URL`, default
//! `redis://127.0.0.1:6379`).

use idempotency_redis::{RedisStore, RedisTokenStore};
use idempotency_test::unavailable;

fn url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

idempotency_test::store_conformance_tests!(async {
    match RedisStore::connect(&url()).await {
        Ok(store) => Some(store.with_key_prefix("test:conformance:")),
        Err(error) => unavailable("Redis", error),
    }
});

idempotency_test::checkpoint_conformance_tests!(async {
    match RedisStore::connect(&url()).await {
        Ok(store) => Some(store.with_key_prefix("test:conformance:")),
        Err(error) => unavailable("Redis", error),
    }
});

idempotency_test::token_conformance_tests!(async {
    match RedisTokenStore::connect(&url()).await {
        Ok(tokens) => Some(tokens.with_key_prefix("test:conformance:token:")),
        Err(error) => unavailable("Redis", error),
    }
});
