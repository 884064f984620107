//! A store's failure keeps the driver's error: `std::error::Error::source` reaches it, and it
//! downcasts to `sqlx::Error` or `redis::RedisError`, against the real servers.
#![cfg(all(feature = "postgres", feature = "redis"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::error::Error as _;

use idempotency_core::sql::PostgresStore;
use idempotency_core::testing::unavailable;
use idempotency_core::{Error, Fingerprint, Idempotency, IdempotencyKey, Scope};

fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

#[tokio::test]
async fn a_database_error_reaches_the_caller_as_sqlx_error() {
    let pool = match sqlx::PgPool::connect(&database_url()).await {
        Ok(pool) => pool,
        Err(error) => return unavailable("PostgreSQL", error).unwrap_or(()),
    };
    // A table that was never migrated: PostgreSQL answers 42P01 (undefined table).
    let store = PostgresStore::new(pool)
        .with_table_name("never_migrated_records")
        .unwrap();
    let engine = Idempotency::new(store);
    let error = match engine
        .begin(
            &Scope::new("sources"),
            &IdempotencyKey::parse("k-1").unwrap(),
            &Fingerprint::of_bytes(b"{}"),
        )
        .await
    {
        Err(error) => error,
        Ok(_) => panic!("a claim on a missing table succeeded"),
    };
    assert!(matches!(error, Error::Backend(_)), "{error:?}");
    let sqlx_error = error
        .source()
        .and_then(|source| source.downcast_ref::<sqlx::Error>())
        .expect("the sqlx error is the source");
    let code = sqlx_error.as_database_error().and_then(|db| db.code());
    assert_eq!(code.as_deref(), Some("42P01"));
    // One failure answers many waiters: a clone keeps the same source.
    let shared = error.clone();
    assert!(
        shared
            .source()
            .unwrap()
            .downcast_ref::<sqlx::Error>()
            .is_some()
    );
}

#[tokio::test]
async fn an_unreachable_redis_reaches_the_caller_as_redis_error() {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    if let Err(error) = idempotency_core::redis::RedisStore::connect(&url).await {
        return unavailable("Redis", error).unwrap_or(());
    }
    // Nothing listens on port 1 of the loopback address.
    let Err(error) = idempotency_core::redis::RedisStore::connect("redis://127.0.0.1:1").await
    else {
        panic!("a connection to a closed port succeeded");
    };
    assert!(matches!(error, Error::Unavailable(_)), "{error:?}");
    let redis_error = error
        .source()
        .and_then(|source| source.downcast_ref::<redis::RedisError>())
        .expect("the Redis error is the source");
    assert!(redis_error.is_connection_refusal() || redis_error.is_io_error());
}
