//! `Tx::after_commit` on the real databases: PostgreSQL (`DATABASE_URL`), MySQL/MariaDB
//! (`MYSQL_URL`) and SQLite (a file per test), through a real axum router. A hook runs once
//! its transaction committed (with the record, or without one as the handler asked), and
//! never when it rolled back or for a replay.
#![cfg(all(
    feature = "postgres",
    feature = "mysql",
    feature = "sqlite",
    feature = "axum"
))]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use idempotency_sql::TxStore;
use idempotency_test::{unavailable, unique_key};
use idempotency_tower::IdempotencyLayer;
use idempotency_tower::transactional::Tx;
use tower::ServiceExt;

/// The trade numbers whose hooks ran, in order.
type Ran = Arc<Mutex<Vec<String>>>;

/// `POST /pay?trade=T&mode=M` with the key `T`.
fn pay(trade: &str, mode: &str) -> http::Request<Body> {
    http::Request::post(format!("/pay?mode={mode}"))
        .header("idempotency-key", trade)
        .body(Body::from(trade.to_owned()))
        .unwrap()
}

/// Sends the requests of the scenario to `app` and checks which hooks ran.
async fn scenario(app: Router, ran: Ran) {
    let send =
        async |request: http::Request<Body>| app.clone().oneshot(request).await.unwrap().status();
    let trade = |n: u8| format!("T{n}-{}", &unique_key().to_hex()[..12]);
    let (ok, failed, without, replayed) = (trade(1), trade(2), trade(3), trade(4));

    assert_eq!(send(pay(&ok, "ok")).await, StatusCode::OK);
    assert_eq!(
        send(pay(&failed, "fail")).await,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    assert_eq!(send(pay(&without, "without_record")).await, StatusCode::OK);
    assert_eq!(send(pay(&replayed, "ok")).await, StatusCode::OK);
    assert_eq!(send(pay(&replayed, "ok")).await, StatusCode::OK, "replayed");
    assert_eq!(
        *ran.lock().unwrap(),
        [ok, without, replayed],
        "committed ones only, once each"
    );
}

/// The handler: registers a hook, then answers as `mode` says.
async fn handler<DB: sqlx::Database>(
    State(ran): State<Ran>,
    axum::extract::Query(query): axum::extract::Query<std::collections::HashMap<String, String>>,
    mut tx: Tx<DB>,
    trade: String,
) -> StatusCode {
    let ran = Arc::clone(&ran);
    let hooked = trade.clone();
    tx.after_commit(move || ran.lock().unwrap().push(hooked));
    match query.get("mode").map(String::as_str) {
        Some("fail") => StatusCode::INTERNAL_SERVER_ERROR,
        Some("without_record") => {
            tx.commit_without_record();
            StatusCode::OK
        }
        _ => StatusCode::OK,
    }
}

fn app<S: TxStore>(store: S, ran: &Ran) -> Router
where
    Tx<S::Database>: axum::extract::FromRequestParts<Ran>,
{
    Router::new()
        .route("/pay", post(handler::<S::Database>))
        .with_state(Arc::clone(ran))
        .layer(
            IdempotencyLayer::builder(store)
                .namespace(format!("after-commit-{}", &unique_key().to_hex()[..8]))
                .shared_scope()
                .build_transactional(),
        )
}

#[tokio::test]
async fn postgres_runs_a_hook_only_after_its_commit() {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let pool = match sqlx::PgPool::connect(&url).await {
        Ok(pool) => pool,
        Err(error) => return unavailable::<()>("PostgreSQL", error).unwrap_or_default(),
    };
    let table = format!("idem_hook_{}", &unique_key().to_hex()[..12]);
    let store = idempotency_sql::PostgresStore::new(pool)
        .with_table_name(&table)
        .unwrap();
    store.migrate().await.unwrap();
    let ran = Ran::default();
    scenario(app(store, &ran), ran).await;
}

#[tokio::test]
async fn mysql_runs_a_hook_only_after_its_commit() {
    let url = std::env::var("MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned());
    let pool = match sqlx::MySqlPool::connect(&url).await {
        Ok(pool) => pool,
        Err(error) => return unavailable::<()>("MySQL", error).unwrap_or_default(),
    };
    let table = format!("idem_hook_{}", &unique_key().to_hex()[..12]);
    let store = idempotency_sql::MySqlStore::new(pool)
        .with_table_name(&table)
        .unwrap();
    store.migrate().await.unwrap();
    let ran = Ran::default();
    scenario(app(store, &ran), ran).await;
}

#[tokio::test]
async fn sqlite_runs_a_hook_only_after_its_commit() {
    let dir = std::env::temp_dir().join("idempotency-tower-tests");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("hook_{}.db", &unique_key().to_hex()[..12]));
    let url = format!("sqlite://{}?mode=rwc", file.display());
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    let store = idempotency_sql::SqliteStore::new(pool);
    store.migrate().await.unwrap();
    let ran = Ran::default();
    scenario(app(store, &ran), ran).await;
}
