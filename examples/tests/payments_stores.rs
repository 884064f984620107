//! The payments service over each store `IDEMPOTENCY_STORE` can select, over real TCP: the
//! gateway's 6 sequential + 6 concurrent callbacks grant one coupon.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use http::StatusCode;
use idempotency_examples::payments::config::{self, Backend, ConfigError, StoreKind};
use idempotency_examples::payments::{AppState, PaymentCallback, Server, app, gateway};

/// A prefix no earlier run used: durable stores keep records across runs.
fn run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{}-{nanos}", std::process::id())
}

async fn one_coupon_per_payment(backend: Backend) {
    let server = Server::spawn(app(AppState::new(backend.repo), backend.store))
        .await
        .unwrap();
    let addr = server.addr();
    let run = run_id();
    let order = gateway::create_order(addr, 7, 1299, &format!("o-{run}"))
        .await
        .unwrap();
    let callback = PaymentCallback {
        trade_no: format!("T-{run}"),
        order_id: order.order_id,
    };
    let mut replies = gateway::deliver_sequentially(addr, &callback, 6)
        .await
        .unwrap();
    replies.extend(
        gateway::deliver_concurrently(addr, &callback, 6)
            .await
            .unwrap(),
    );
    let fresh = replies
        .iter()
        .filter(|r| r.status == StatusCode::OK && !r.is_replay())
        .count();
    assert_eq!(fresh, 1, "{}", gateway::tally(&replies));
    assert!(
        replies.iter().all(|r| r.status == StatusCode::OK),
        "{}",
        gateway::tally(&replies)
    );
    assert_eq!(gateway::coupons(addr, 7).await.unwrap(), 1);
    server.shutdown().await.unwrap();
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store() {
    let backend = config::backend(StoreKind::Memory, env).await.unwrap();
    assert_eq!(backend.kind, StoreKind::Memory);
    one_coupon_per_payment(backend).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_store() {
    let backend = match config::backend(StoreKind::Redis, env).await {
        Ok(backend) => backend,
        Err(error) => {
            idempotency_core::testing::unavailable::<()>("Redis", error);
            return;
        }
    };
    assert_eq!(backend.kind, StoreKind::Redis);
    one_coupon_per_payment(backend).await;
}

#[test]
fn store_names() {
    assert_eq!("".parse::<StoreKind>().unwrap(), StoreKind::Memory);
    assert_eq!("Redis".parse::<StoreKind>().unwrap(), StoreKind::Redis);
    assert_eq!(
        "postgresql".parse::<StoreKind>().unwrap(),
        StoreKind::Postgres
    );
    assert_eq!("mariadb".parse::<StoreKind>().unwrap(), StoreKind::Mysql);
    assert!(matches!(
        "mongo".parse::<StoreKind>(),
        Err(ConfigError::UnknownStore(name)) if name == "mongo"
    ));
}

#[cfg(not(feature = "redis"))]
#[tokio::test]
async fn a_store_left_out_of_the_build_names_its_feature() {
    let error = config::backend(StoreKind::Redis, env).await.unwrap_err();
    assert!(matches!(
        error,
        ConfigError::FeatureDisabled { store: "redis" }
    ));
    assert!(error.to_string().contains("--features redis"));
}
