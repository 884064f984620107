//! Stored keys and scopes are hashed: after requests through the layer with a tenant header,
//! the raw store contents (every Redis key name and value under the store's prefix; every
//! PostgreSQL row as text) contain neither the raw idempotency key nor the tenant string, in
//! the clear or hex-encoded. Two tenants with the same key get their own answers.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Its helpers serve the server-backed tests: without their features they go unused.
#![cfg_attr(
    not(any(feature = "redis", feature = "postgres")),
    allow(dead_code, unused_imports)
)]

mod hardening_support;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::routing::post;
use hardening_support::*;
use http_body_util::BodyExt;
use idempotency_core::Store;
use idempotency_tower::IdempotencyLayer;
use tower::ServiceExt;

fn hex(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

/// Sends the same key for two tenants (twice each) and returns (key, tenants).
async fn traffic<S: Store>(store: S) -> (String, [String; 2]) {
    let key = unique("rawkey");
    let tenants = [unique("tenant_a"), unique("tenant_b")];
    let app = Router::new()
        .route(
            "/pay",
            post(|headers: HeaderMap| async move {
                // The answer names the tenant by a digest-free label, never the raw strings.
                let label = if headers["x-tenant-id"]
                    .to_str()
                    .unwrap()
                    .starts_with("tenant_a")
                {
                    "A"
                } else {
                    "B"
                };
                (StatusCode::CREATED, label)
            }),
        )
        .layer(
            IdempotencyLayer::builder(store)
                .namespace("iso.raw")
                .principal_header(http::HeaderName::from_static("x-tenant-id"))
                .build(),
        );
    for (tenant, label) in tenants.iter().zip(["A", "B"]) {
        for attempt in 0..2 {
            let request = Request::post("/pay")
                .header("idempotency-key", key.as_str())
                .header("x-tenant-id", tenant.as_str())
                .body(Body::from("{\"amount\":1}"))
                .unwrap();
            let response = app.clone().oneshot(request).await.unwrap();
            assert_eq!(response.status(), StatusCode::CREATED);
            assert_eq!(
                response.headers().contains_key("idempotent-replayed"),
                attempt == 1
            );
            let body = response.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(&body[..], label.as_bytes(), "{tenant} got another's answer");
        }
    }
    (key, tenants)
}

fn assert_absent(raw: &str, key: &str, tenants: &[String; 2]) {
    assert!(!raw.is_empty(), "nothing was stored");
    for secret in std::iter::once(key).chain(tenants.iter().map(String::as_str)) {
        assert!(!raw.contains(secret), "{secret} is stored in the clear");
        assert!(
            !raw.contains(&hex(secret)),
            "{secret} is stored hex-encoded"
        );
    }
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn redis_stores_neither_raw_keys_nor_tenants() {
    use idempotency_redis::{RedisStore, driver};
    if !reachable("Redis", &redis_url()) {
        return;
    }
    let prefix = format!("{}:", unique("iso"));
    let store = RedisStore::connect(&redis_url())
        .await
        .unwrap()
        .with_key_prefix(prefix.clone());
    let mut connection = store.connection().clone();
    let (key, tenants) = traffic(store).await;

    let names: Vec<String> = driver::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut connection)
        .await
        .unwrap();
    assert!(names.len() >= 2, "two tenants, two records: {names:?}");
    let mut raw = String::new();
    for name in &names {
        raw.push_str(name);
        let kind: String = driver::cmd("TYPE")
            .arg(name)
            .query_async(&mut connection)
            .await
            .unwrap();
        let values: Vec<Vec<u8>> = match kind.as_str() {
            "hash" => driver::cmd("HGETALL")
                .arg(name)
                .query_async(&mut connection)
                .await
                .unwrap(),
            "string" => vec![
                driver::cmd("GET")
                    .arg(name)
                    .query_async(&mut connection)
                    .await
                    .unwrap(),
            ],
            other => panic!("unexpected Redis type {other} for {name}"),
        };
        for value in values {
            raw.push_str(&String::from_utf8_lossy(&value));
            raw.push_str(&hex_bytes(&value));
        }
    }
    assert_absent(&raw, &key, &tenants);
    let _: () = driver::cmd("DEL")
        .arg(&names)
        .query_async(&mut connection)
        .await
        .unwrap();
}

fn hex_bytes(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_stores_neither_raw_keys_nor_tenants() {
    if !reachable("PostgreSQL", &postgres_url()) {
        return;
    }
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(&postgres_url())
        .await
        .unwrap();
    let table = unique("iso");
    let store = idempotency_sql::PostgresStore::new(pool.clone())
        .with_table_name(&table)
        .unwrap();
    store.migrate().await.unwrap();
    let (key, tenants) = traffic(store).await;
    let rows: Vec<String> = sqlx::query_scalar(&format!("SELECT t::text FROM {table} t"))
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(rows.len(), 2, "one record per tenant: {rows:?}");
    assert_absent(&rows.join("\n"), &key, &tenants);
    sqlx::query(&format!("DROP TABLE {table}"))
        .execute(&pool)
        .await
        .unwrap();
}
