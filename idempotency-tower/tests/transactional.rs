//! Transactional HTTP against the real databases: PostgreSQL (`DATABASE_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`), MySQL/MariaDB (`MYSQL_URL`, default
//! `mysql://root@127.0.0.1:3306/test`) and SQLite (a file per test). Every scenario of
//! `transactional_support` runs on each, through a real axum router.
#![cfg(all(
    feature = "postgres",
    feature = "mysql",
    feature = "sqlite",
    feature = "axum"
))]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod transactional_support;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use idempotency_sql::SCHEMA_TABLE;
use idempotency_test::{unavailable, unique_key};
use idempotency_tower::transactional::Tx;
use serde::Deserialize;
use transactional_support::{Counters, Harness};

/// A fresh name for a per-test table.
fn unique_table(prefix: &str) -> String {
    format!("{prefix}_{}", &unique_key().to_hex()[..12])
}

/// The body of `POST /grant`.
#[derive(Deserialize)]
struct Grant {
    trade_no: String,
    #[serde(default)]
    mode: String,
    #[serde(default)]
    ms: u64,
}

/// The handlers' state: the counters and the statement that grants a coupon.
#[derive(Clone)]
struct Grants {
    counters: Arc<Counters>,
    insert: Arc<str>,
}

/// How the handler answers after granting, by the body's `mode`.
fn answer<T: Send + 'static>(grant: &Grant, tx: T, commit_without_record: fn(T)) -> Response {
    match grant.mode.as_str() {
        "fail" => (StatusCode::INTERNAL_SERVER_ERROR, "failed").into_response(),
        "not_found" => (StatusCode::NOT_FOUND, "no such order").into_response(),
        "bad_request" => (StatusCode::BAD_REQUEST, "bad callback").into_response(),
        "panic" => panic!("the handler panics after its write"),
        "without_record" => {
            commit_without_record(tx);
            (StatusCode::OK, "granted, no record").into_response()
        }
        "keep" => {
            tokio::spawn(async move {
                let _kept = tx;
                tokio::time::sleep(Duration::from_millis(300)).await;
            });
            (StatusCode::OK, "kept the transaction").into_response()
        }
        _ => (StatusCode::OK, format!("granted {}", grant.trade_no)).into_response(),
    }
}

/// The grant handler on one database: counts the run, waits `ms`, grants the coupon in the
/// request's transaction, then answers as `mode` says.
macro_rules! grant_handler {
    ($db:ty) => {
        async fn grant(
            State(grants): State<Grants>,
            mut tx: Tx<$db>,
            Json(grant): Json<Grant>,
        ) -> Response {
            grants.counters.run();
            tokio::time::sleep(Duration::from_millis(grant.ms)).await;
            sqlx::query(&grants.insert)
                .bind(&grant.trade_no)
                .execute(&mut *tx)
                .await
                .unwrap();
            answer(&grant, tx, Tx::commit_without_record)
        }

        fn routes(insert: &str, counters: Arc<Counters>) -> Router {
            Router::new()
                .route("/grant", post(grant))
                .with_state(Grants {
                    counters,
                    insert: Arc::from(insert),
                })
        }
    };
}

mod postgres {
    use super::*;
    use idempotency_sql::PostgresStore;
    use sqlx::Postgres;
    use sqlx::postgres::{PgPool, PgPoolOptions};

    grant_handler!(Postgres);

    struct Pg {
        store: PostgresStore,
        grants: String,
    }

    fn url() -> String {
        std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
    }

    async fn pool(connections: u32) -> Option<PgPool> {
        match PgPoolOptions::new()
            .max_connections(connections)
            .connect(&url())
            .await
        {
            Ok(pool) => Some(pool),
            Err(error) => unavailable("PostgreSQL", error),
        }
    }

    async fn harness() -> Option<Pg> {
        let pool = pool(8).await?;
        let store = PostgresStore::new(pool.clone())
            .with_table_name(&unique_table("tx_idem"))
            .unwrap();
        store.migrate().await.unwrap();
        let grants = unique_table("tx_grants");
        sqlx::query(&format!(
            "CREATE TABLE {grants} (id BIGSERIAL PRIMARY KEY, trade_no TEXT NOT NULL)"
        ))
        .execute(&pool)
        .await
        .unwrap();
        Some(Pg { store, grants })
    }

    impl Harness for Pg {
        type Store = PostgresStore;

        fn store(&self) -> PostgresStore {
            self.store.clone()
        }

        async fn other_process(&self, connections: u32) -> PostgresStore {
            PostgresStore::new(pool(connections).await.unwrap())
                .with_table_name(self.store.table_name())
                .unwrap()
        }

        fn routes(&self, counters: Arc<Counters>) -> Router {
            let insert = format!("INSERT INTO {} (trade_no) VALUES ($1)", self.grants);
            routes(&insert, counters)
        }

        async fn cleanup(&self) {
            let table = self.store.table_name();
            sqlx::raw_sql(&format!(
                "DROP TABLE {table}; DROP SEQUENCE {table}_token_seq; DROP TABLE {}; \
                 DELETE FROM {SCHEMA_TABLE} WHERE table_name = '{table}'",
                self.grants
            ))
            .execute(self.store.pool())
            .await
            .unwrap();
        }

        async fn grants(&self, trade_no: &str) -> i64 {
            let sql = format!("SELECT COUNT(*) FROM {} WHERE trade_no = $1", self.grants);
            let (n,): (i64,) = sqlx::query_as(&sql)
                .bind(trade_no)
                .fetch_one(self.store.pool())
                .await
                .unwrap();
            n
        }
    }

    crate::transactional_tests!(harness());
}

mod mysql {
    use super::*;
    use idempotency_sql::MySqlStore;
    use sqlx::MySql;
    use sqlx::mysql::{MySqlPool, MySqlPoolOptions};

    grant_handler!(MySql);

    struct My {
        store: MySqlStore,
        grants: String,
    }

    fn url() -> String {
        std::env::var("MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned())
    }

    async fn pool(connections: u32) -> Option<MySqlPool> {
        match MySqlPoolOptions::new()
            .max_connections(connections)
            .connect(&url())
            .await
        {
            Ok(pool) => Some(pool),
            Err(error) => unavailable("MySQL", error),
        }
    }

    async fn harness() -> Option<My> {
        let pool = pool(8).await?;
        let store = MySqlStore::new(pool.clone())
            .with_table_name(&unique_table("tx_idem"))
            .unwrap();
        store.migrate().await.unwrap();
        let grants = unique_table("tx_grants");
        sqlx::query(&format!(
            "CREATE TABLE {grants} (id BIGINT AUTO_INCREMENT PRIMARY KEY, \
             trade_no VARCHAR(64) NOT NULL) ENGINE = InnoDB"
        ))
        .execute(&pool)
        .await
        .unwrap();
        Some(My { store, grants })
    }

    impl Harness for My {
        type Store = MySqlStore;

        fn store(&self) -> MySqlStore {
            self.store.clone()
        }

        async fn other_process(&self, connections: u32) -> MySqlStore {
            let store = MySqlStore::new(pool(connections).await.unwrap())
                .with_table_name(self.store.table_name())
                .unwrap();
            store.migrate().await.unwrap();
            store
        }

        fn routes(&self, counters: Arc<Counters>) -> Router {
            let insert = format!("INSERT INTO {} (trade_no) VALUES (?)", self.grants);
            routes(&insert, counters)
        }

        async fn cleanup(&self) {
            let table = self.store.table_name();
            for statement in [
                format!("DROP TABLE {table}"),
                format!("DROP TABLE {}", self.grants),
                format!("DELETE FROM {SCHEMA_TABLE} WHERE table_name = '{table}'"),
            ] {
                sqlx::query(&statement)
                    .execute(self.store.pool())
                    .await
                    .unwrap();
            }
        }

        async fn grants(&self, trade_no: &str) -> i64 {
            let sql = format!("SELECT COUNT(*) FROM {} WHERE trade_no = ?", self.grants);
            let (n,): (i64,) = sqlx::query_as(&sql)
                .bind(trade_no)
                .fetch_one(self.store.pool())
                .await
                .unwrap();
            n
        }
    }

    crate::transactional_tests!(harness());
}

mod sqlite {
    use super::*;
    use idempotency_sql::SqliteStore;
    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
    use sqlx::{Sqlite, SqlitePool};

    grant_handler!(Sqlite);

    struct Lite {
        store: SqliteStore,
        file: std::path::PathBuf,
        grants: String,
    }

    async fn pool(file: &std::path::Path, connections: u32) -> SqlitePool {
        let options = SqliteConnectOptions::new()
            .filename(file)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(5));
        SqlitePoolOptions::new()
            .max_connections(connections)
            .connect_with(options)
            .await
            .unwrap()
    }

    async fn harness() -> Option<Lite> {
        let dir = std::env::temp_dir().join("idempotency-tower-tests");
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(format!("{}.db", unique_table("tx")));
        let pool = pool(&file, 8).await;
        let store = SqliteStore::new(pool.clone());
        store.migrate().await.unwrap();
        let grants = unique_table("tx_grants");
        sqlx::query(&format!(
            "CREATE TABLE {grants} (id INTEGER PRIMARY KEY, trade_no TEXT NOT NULL)"
        ))
        .execute(&pool)
        .await
        .unwrap();
        Some(Lite {
            store,
            file,
            grants,
        })
    }

    impl Harness for Lite {
        type Store = SqliteStore;

        fn store(&self) -> SqliteStore {
            self.store.clone()
        }

        async fn other_process(&self, connections: u32) -> SqliteStore {
            SqliteStore::new(pool(&self.file, connections).await)
        }

        fn routes(&self, counters: Arc<Counters>) -> Router {
            let insert = format!("INSERT INTO {} (trade_no) VALUES (?1)", self.grants);
            routes(&insert, counters)
        }

        async fn cleanup(&self) {
            self.store.pool().close().await;
            for suffix in ["", "-wal", "-shm"] {
                let mut path = self.file.clone().into_os_string();
                path.push(suffix);
                let _ = std::fs::remove_file(path);
            }
        }

        async fn grants(&self, trade_no: &str) -> i64 {
            let sql = format!("SELECT COUNT(*) FROM {} WHERE trade_no = ?1", self.grants);
            let (n,): (i64,) = sqlx::query_as(&sql)
                .bind(trade_no)
                .fetch_one(self.store.pool())
                .await
                .unwrap();
            n
        }

        fn single_writer(&self) -> bool {
            true
        }
    }

    crate::transactional_tests!(harness());
}
