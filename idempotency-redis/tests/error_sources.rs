//! A store's failure keeps the driver's error: `std::error::Error::source` reaches it, and it
//! downcasts to `redis::RedisError`, against the real server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::error::Error as _;

use idempotency_core::Error;
use idempotency_test::unavailable;

#[tokio::test]
async fn an_unreachable_redis_reaches_the_caller_as_redis_error() {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    if let Err(error) = idempotency_redis::RedisStore::connect(&url).await {
        return unavailable("Redis", error).unwrap_or(());
    }
    // Nothing listens on port 1 of the loopback address.
    let Err(error) = idempotency_redis::RedisStore::connect("redis://127.0.0.1:1").await else {
        panic!("a connection to a closed port succeeded");
    };
    assert!(matches!(error, Error::Unavailable(_)), "{error:?}");
    let redis_error = error
        .source()
        .and_then(|source| source.downcast_ref::<redis::RedisError>())
        .expect("the Redis error is the source");
    assert!(redis_error.is_connection_refusal() || redis_error.is_io_error());
}
