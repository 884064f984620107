//! A SQL store's failure keeps the driver's error: `std::error::Error::source` reaches it, and
//! it downcasts to `sqlx::Error`, against the real server.
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::error::Error as _;

use idempotency_core::{Error, Fingerprint, Idempotency, IdempotencyKey, InFlightPolicy, Scope};
use idempotency_sql::PostgresStore;
use idempotency_test::unavailable;

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
        .claim(
            &Scope::new("sources"),
            &IdempotencyKey::parse("k-1").unwrap(),
            &Fingerprint::of_bytes(b"{}"),
            InFlightPolicy::Reject,
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
