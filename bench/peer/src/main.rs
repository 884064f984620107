//! The payments service's bare router (`bare`), served with the crates.io peer `idempotent` 1.0
//! around it (`IDEMPOTENCY_LAYER=on`: `IdempotencyLayer::new(store).require_key(true)`, as its
//! README shows) or without (`IDEMPOTENCY_LAYER=off`). The peer's store is its memory store, or
//! its Valkey/Redis store with `IDEMPOTENCY_STORE=redis` (`REDIS_URL`, default
//! redis://127.0.0.1:6379), as the payments binary keeps its records in Redis then and its
//! orders in memory. It listens on `ADDR` (default 127.0.0.1:3000), as the payments binary
//! does, so the benchmark scripts drive both alike.

use std::sync::Arc;

use axum_payments::{AppState, MemoryRepo, bare};

#[tokio::main]
async fn main() {
    let addr = std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());
    let state = AppState::new(Arc::new(MemoryRepo::new()));
    let bare = bare(state);
    let app = match std::env::var("IDEMPOTENCY_LAYER").as_deref() {
        Ok("off") => bare,
        Ok("on") | Err(_) => match std::env::var("IDEMPOTENCY_STORE").as_deref() {
            Ok("redis") => {
                let url = std::env::var("REDIS_URL")
                    .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
                let store = idempotent::store::valkey::ValkeyStore::with_url(url)
                    .prefix("peer-bench")
                    .try_build()
                    .await
                    .expect("the peer's Redis store connects");
                bare.layer(idempotent::middleware::IdempotencyLayer::new(store).require_key(true))
            }
            _ => {
                let store = idempotent::memory::MemoryStore::builder()
                    .try_build()
                    .expect("the peer's memory store starts");
                bare.layer(idempotent::middleware::IdempotencyLayer::new(store).require_key(true))
            }
        },
        Ok(other) => {
            eprintln!("IDEMPOTENCY_LAYER={other}: expected on or off");
            std::process::exit(2);
        }
    };
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .expect("the address is free");
    axum::serve(listener, app).await.expect("serves");
}
