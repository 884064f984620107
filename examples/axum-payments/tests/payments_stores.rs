//! The payments service over each store `IDEMPOTENCY_STORE` can select, over real TCP: the
//! gateway's 6 sequential + 6 concurrent callbacks grant one coupon.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum_payments::config::{self, Backend, ConfigError, StoreKind};
use axum_payments::service::{self, Mode};
use axum_payments::{AppState, CALLBACK_NAMESPACE, OrderStatus, PaymentCallback, gateway};
use http::StatusCode;
use idempotency_core::{IdempotencyKey, RecordState, Scope, Store};

/// A prefix no earlier run used: durable stores keep records across runs.
fn run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{}-{nanos}", std::process::id())
}

/// A user id no earlier run used: SQL repositories keep orders and coupons across runs.
fn fresh_user() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    u64::try_from(nanos % 1_000_000_000_000).unwrap() + u64::from(std::process::id())
}

async fn one_coupon_per_payment(backend: Backend) {
    let store = backend.store.clone();
    let state = AppState::new(backend.repo.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = service::spawn(listener, backend, state, Mode::Guarded).unwrap();
    let addr = server.addr();
    let run = run_id();
    let user = fresh_user();
    let order = gateway::create_order(addr, user, 1299, &format!("o-{run}"))
        .await
        .unwrap();
    assert_eq!(order.user_id, user);
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
    assert_eq!(gateway::coupons(addr, user).await.unwrap(), 1);
    let paid = gateway::order(addr, order.order_id).await.unwrap();
    assert_eq!(paid.status, OrderStatus::Paid);
    assert_eq!(paid.trade_no.as_deref(), Some(callback.trade_no.as_str()));
    // The trade's record: on a SQL store, written in the payment's own transaction.
    let key = Scope::new(CALLBACK_NAMESPACE)
        .storage_key(&IdempotencyKey::parse(&callback.trade_no).unwrap());
    let record = store.get(&key).await.unwrap().expect("the trade's record");
    assert_eq!(record.state, RecordState::Completed);
    assert_eq!(record.outcome.unwrap().status, 200);

    // Another trade number for the paid order reaches the repository (a new key for the layer):
    // the transaction's state machine answers "already PAID" and grants nothing.
    let second = PaymentCallback {
        trade_no: format!("T2-{run}"),
        order_id: order.order_id,
    };
    let replies = gateway::deliver_sequentially(addr, &second, 1)
        .await
        .unwrap();
    assert_eq!(replies[0].status, StatusCode::OK);
    assert!(!replies[0].is_replay());
    assert_eq!(gateway::coupons(addr, user).await.unwrap(), 1);

    // A cancelled order cannot be paid: illegal transition, 409, nothing granted.
    let other = gateway::create_order(addr, user, 1, &format!("o2-{run}"))
        .await
        .unwrap();
    let cancel = axum_payments::client::request(
        http::Method::POST,
        &format!("/orders/{}/cancel", other.order_id),
        None,
        None,
    )
    .unwrap();
    let cancelled = axum_payments::client::send_once(addr, cancel)
        .await
        .unwrap();
    assert_eq!(cancelled.status, StatusCode::OK);
    let late = PaymentCallback {
        trade_no: format!("T3-{run}"),
        order_id: other.order_id,
    };
    let replies = gateway::deliver_sequentially(addr, &late, 1).await.unwrap();
    assert_eq!(replies[0].status, StatusCode::CONFLICT);
    assert_eq!(gateway::coupons(addr, user).await.unwrap(), 1);
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
            idempotency_test::unavailable::<()>("Redis", error);
            return;
        }
    };
    assert_eq!(backend.kind, StoreKind::Redis);
    one_coupon_per_payment(backend).await;
}

/// The service on a Redis Cluster (`IDEMPOTENCY_STORE=redis` with `REDIS_CLUSTER_URLS`,
/// default the three nodes `.ci/redis-cluster.sh` starts): the same answers as on one node.
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_store() {
    let nodes = env("REDIS_CLUSTER_URLS").unwrap_or_else(|| {
        "redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003".to_owned()
    });
    // `REDIS_URL` points nowhere: only the cluster can answer.
    let cluster_env = move |name: &str| match name {
        "REDIS_CLUSTER_URLS" => Some(nodes.clone()),
        "REDIS_URL" => Some("redis://127.0.0.1:1".to_owned()),
        _ => env(name),
    };
    let backend = match config::backend(StoreKind::Redis, cluster_env).await {
        Ok(backend) => backend,
        Err(error) => {
            idempotency_test::unavailable::<()>("the Redis Cluster", error);
            return;
        }
    };
    one_coupon_per_payment(backend).await;
}

/// Connects the SQL backend `kind`, or reports it unreachable (a failure under `CI=true`).
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
async fn sql_backend(kind: StoreKind, service: &str) -> Option<Backend> {
    // Beside the other example tests' files (`.ci/run` empties the directory before each run).
    let dir = std::env::temp_dir().join("idempotency-example-tests");
    std::fs::create_dir_all(&dir).expect("the test directory can be created");
    let sqlite = format!(
        "sqlite://{}/payments-test-{}.db?mode=rwc",
        dir.display(),
        run_id()
    );
    let result = config::backend(kind, move |name| {
        if name == "SQLITE_URL" {
            Some(sqlite.clone())
        } else {
            std::env::var(name).ok()
        }
    })
    .await;
    match result {
        Ok(backend) => {
            assert_eq!(backend.kind, kind);
            Some(backend)
        }
        Err(error) => idempotency_test::unavailable(service, error),
    }
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_store_and_repository() {
    if let Some(backend) = sql_backend(StoreKind::Sqlite, "SQLite").await {
        one_coupon_per_payment(backend).await;
    }
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_and_repository() {
    if let Some(backend) = sql_backend(StoreKind::Postgres, "PostgreSQL").await {
        one_coupon_per_payment(backend).await;
    }
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_store_and_repository() {
    if let Some(backend) = sql_backend(StoreKind::Mysql, "MySQL").await {
        one_coupon_per_payment(backend).await;
    }
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

/// `IDEMPOTENCY_STORE=redis` with `DATABASE_URL`: the records in Redis, orders and coupons in
/// PostgreSQL (an order the service creates is read back through a repository of its own).
#[cfg(all(feature = "redis", feature = "postgres"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_records_beside_postgres_business_data() {
    use axum_payments::{NewOrder, PaymentsRepo};
    let url = env("DATABASE_URL").unwrap_or_else(|| config::DEFAULT_DATABASE_URL.to_owned());
    let with_database = move |name: &str| match name {
        "DATABASE_URL" => Some(url.clone()),
        _ => env(name),
    };
    let backend = match config::backend(StoreKind::Redis, with_database).await {
        Ok(backend) => backend,
        Err(error) => {
            idempotency_test::unavailable::<()>("Redis and PostgreSQL", error);
            return;
        }
    };
    let order = backend
        .repo
        .create_order(NewOrder {
            user_id: fresh_user(),
            amount_cents: 4200,
        })
        .await
        .unwrap();
    let database = env("DATABASE_URL").unwrap_or_else(|| config::DEFAULT_DATABASE_URL.to_owned());
    let pool = sqlx::PgPool::connect(&database).await.unwrap();
    let beside =
        axum_payments::sql::PostgresRepo::new(pool, axum_payments::sql::DEFAULT_TABLE_PREFIX)
            .await
            .unwrap();
    let found = beside.order(order.order_id).await.unwrap();
    assert_eq!(found.map(|o| o.order_id), Some(order.order_id));
    one_coupon_per_payment(backend).await;
}
