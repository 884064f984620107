//! `#[idempotent]` on real SQL backends: dedup mode over a SQL store, transactional mode
//! (record and business writes in one transaction) and state-machine mode, on SQLite (a file in
//! the temporary directory), PostgreSQL (DATABASE_URL, default
//! postgres://postgres@127.0.0.1:5432/test) and MySQL/MariaDB (MYSQL_URL, default
//! mysql://root@127.0.0.1:3306/test), each with 200 concurrent duplicates.
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idempotency_core::Error;
use idempotency_function::Recorded;
use idempotency_function::idempotent;
use idempotency_test::{unavailable, unique_key};
use serde::{Deserialize, Serialize};

const DUPLICATES: usize = 200;

#[derive(Debug, PartialEq, Serialize, Deserialize)]
enum AppError {
    InFlight,
    Mismatch,
    Illegal(String),
    NotFound,
    Declined,
    Other(String),
}

impl From<Error> for AppError {
    fn from(error: Error) -> Self {
        match error {
            Error::InFlight { .. } => Self::InFlight,
            Error::Mismatch => Self::Mismatch,
            Error::IllegalTransition { current } => Self::Illegal(current),
            Error::NotFound => Self::NotFound,
            other => Self::Other(other.to_string()),
        }
    }
}

impl From<sqlx::Error> for AppError {
    fn from(error: sqlx::Error) -> Self {
        Self::Other(error.to_string())
    }
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", &unique_key().to_hex()[..16])
}

fn unique_id() -> i64 {
    let bytes = unique_key().0;
    i64::from_be_bytes(bytes[..8].try_into().unwrap()) & i64::MAX
}

/// The same scenarios for every backend: `$db` the sqlx database, `$store` its store.
macro_rules! scenarios {
    ($db:ty, $store:ty, $pool:path) => {
        use super::*;
        use idempotency_core::Idempotency;

        const ORDERS: &str = "idem_macro_orders";
        const COUPONS: &str = "idem_macro_coupons";

        struct Shop {
            store: $store,
        }

        impl Shop {
            /// Transactional mode: the coupon row and the dedup record commit together.
            #[idempotent(tx = tx, key = trade_no, store = self.store, namespace = "macro.paid", fingerprint = [amount])]
            async fn on_paid(
                &self,
                tx: &mut sqlx::Transaction<'_, $db>,
                trade_no: &str,
                amount: i64,
                decline: bool,
            ) -> Result<i64, AppError> {
                let grant = format!(
                    "INSERT INTO {COUPONS} (trade_no, order_id) VALUES ('{trade_no}', {amount})"
                );
                sqlx::query(&grant).execute(&mut **tx).await?;
                if decline {
                    return Err(AppError::Declined);
                }
                Ok(amount * 10)
            }

            /// Transactional mode, telling its caller whether it ran or replayed.
            #[idempotent(tx = tx, key = trade_no, store = self.store, namespace = "macro.recorded")]
            async fn on_refund(
                &self,
                tx: &mut sqlx::Transaction<'_, $db>,
                trade_no: &str,
            ) -> Result<Recorded<i64>, AppError> {
                let grant = format!(
                    "INSERT INTO {COUPONS} (trade_no, order_id) VALUES ('{trade_no}', 0)"
                );
                sqlx::query(&grant).execute(&mut **tx).await?;
                Ok(Recorded::new(11))
            }
        }

        /// State-machine mode: the coupon is granted only when the order moves to PAID.
        #[idempotent(
            transition(table = "idem_macro_orders", id = order_id, from = ["WAIT_PAY", "PAYING"], to = "PAID"),
            executor = tx,
            already = "already paid".to_owned()
        )]
        async fn mark_paid(
            tx: &mut sqlx::Transaction<'_, $db>,
            order_id: i64,
        ) -> Result<String, AppError> {
            let grant = format!(
                "INSERT INTO {COUPONS} (trade_no, order_id) VALUES ('order', {order_id})"
            );
            sqlx::query(&grant).execute(&mut **tx).await?;
            Ok("granted".to_owned())
        }

        /// State-machine mode on an integer status column: 10 = paid, 20 = shipped.
        #[idempotent(
            transition(table = "idem_macro_coded_orders", id = order_id, from = 10, to = 20),
            executor = tx,
            already = "already shipped".to_owned()
        )]
        async fn mark_shipped(
            tx: &mut sqlx::Transaction<'_, $db>,
            order_id: i64,
        ) -> Result<String, AppError> {
            let grant = format!(
                "INSERT INTO {COUPONS} (trade_no, order_id) VALUES ('shipped', {order_id})"
            );
            sqlx::query(&grant).execute(&mut **tx).await?;
            Ok("shipped".to_owned())
        }

        /// Dedup mode over the SQL store as an ordinary engine.
        #[idempotent(key = job, store = engine, namespace = "macro.dedup", wait = "60s")]
        async fn dedup_job(
            engine: &Idempotency<Arc<$store>>,
            job: &str,
            runs: &AtomicUsize,
        ) -> Result<usize, AppError> {
            Ok(runs.fetch_add(1, Ordering::SeqCst) + 100)
        }

        async fn shop() -> Option<(Shop, sqlx::Pool<$db>)> {
            let pool = $pool().await?;
            let store = <$store>::new(pool.clone())
                .with_table_name("idem_macro_records")
                .unwrap();
            store.migrate().await.unwrap();
            let mut tx = pool.begin().await.unwrap();
            lock_for_ddl(&mut tx).await;
            for ddl in [
                format!("CREATE TABLE IF NOT EXISTS {ORDERS} (id BIGINT PRIMARY KEY, status TEXT NOT NULL)"),
                format!("CREATE TABLE IF NOT EXISTS {COUPONS} (trade_no TEXT NOT NULL, order_id BIGINT NOT NULL)"),
                "CREATE TABLE IF NOT EXISTS idem_macro_coded_orders (id BIGINT PRIMARY KEY, status INT NOT NULL)".to_owned(),
            ] {
                sqlx::query(&ddl).execute(&mut *tx).await.unwrap();
            }
            tx.commit().await.unwrap();
            Some((Shop { store }, pool))
        }

        async fn coupons(pool: &sqlx::Pool<$db>, filter: &str) -> i64 {
            let sql = format!("SELECT COUNT(*) FROM {COUPONS} WHERE {filter}");
            let (count,): (i64,) = sqlx::query_as(&sql).fetch_one(pool).await.unwrap();
            count
        }

        async fn order(pool: &sqlx::Pool<$db>, status: &str) -> i64 {
            let id = unique_id();
            let sql = format!("INSERT INTO {ORDERS} (id, status) VALUES ({id}, '{status}')");
            sqlx::query(&sql).execute(pool).await.unwrap();
            id
        }

        #[tokio::test]
        async fn transactional_duplicates_replay_and_write_once() {
            let Some((shop, pool)) = shop().await else { return };
            let trade_no = unique("T");
            let mut results = Vec::new();
            for _ in 0..2 {
                let mut tx = pool.begin().await.unwrap();
                results.push(shop.on_paid(&mut tx, &trade_no, 7, false).await);
                tx.commit().await.unwrap();
            }
            assert_eq!(results, [Ok(70), Ok(70)]);
            let filter = format!("trade_no = '{trade_no}'");
            assert_eq!(coupons(&pool, &filter).await, 1);

            // Same key, other amount: refused, nothing written.
            let mut tx = pool.begin().await.unwrap();
            assert_eq!(shop.on_paid(&mut tx, &trade_no, 8, false).await, Err(AppError::Mismatch));
            tx.commit().await.unwrap();
            assert_eq!(coupons(&pool, &filter).await, 1);
        }

        #[tokio::test]
        async fn the_transactional_mode_reports_a_replay() {
            let Some((shop, pool)) = shop().await else { return };
            let trade_no = unique("F");
            let mut seen = Vec::new();
            for _ in 0..2 {
                let mut tx = pool.begin().await.unwrap();
                let recorded = shop.on_refund(&mut tx, &trade_no).await.unwrap();
                tx.commit().await.unwrap();
                seen.push((recorded.is_replay(), recorded.into_inner()));
            }
            assert_eq!(seen, [(false, 11), (true, 11)]);
            assert_eq!(coupons(&pool, &format!("trade_no = '{trade_no}'")).await, 1);
        }

        #[tokio::test]
        async fn a_rolled_back_transaction_takes_its_record_with_it() {
            let Some((shop, pool)) = shop().await else { return };
            let trade_no = unique("R");
            let mut tx = pool.begin().await.unwrap();
            assert_eq!(shop.on_paid(&mut tx, &trade_no, 3, false).await, Ok(30));
            tx.rollback().await.unwrap();
            // Neither the coupon nor the record survived: the retry runs for real.
            let mut tx = pool.begin().await.unwrap();
            assert_eq!(shop.on_paid(&mut tx, &trade_no, 3, false).await, Ok(30));
            tx.commit().await.unwrap();
            assert_eq!(coupons(&pool, &format!("trade_no = '{trade_no}'")).await, 1);
        }

        #[tokio::test]
        async fn an_error_releases_the_claim_even_if_the_transaction_commits() {
            let Some((shop, pool)) = shop().await else { return };
            let trade_no = unique("E");
            let mut tx = pool.begin().await.unwrap();
            assert_eq!(shop.on_paid(&mut tx, &trade_no, 4, true).await, Err(AppError::Declined));
            tx.commit().await.unwrap();
            let mut tx = pool.begin().await.unwrap();
            assert_eq!(shop.on_paid(&mut tx, &trade_no, 4, false).await, Ok(40));
            tx.commit().await.unwrap();
            // The declined attempt's write was committed by the caller; the retry wrote again.
            assert_eq!(coupons(&pool, &format!("trade_no = '{trade_no}'")).await, 2);
        }

        #[tokio::test]
        async fn concurrent_transactional_duplicates_write_once() {
            let Some((shop, pool)) = shop().await else { return };
            let shop = Arc::new(shop);
            let trade_no = Arc::new(unique("C"));
            let mut tasks = Vec::new();
            for _ in 0..DUPLICATES {
                let (shop, pool, trade_no) = (Arc::clone(&shop), pool.clone(), Arc::clone(&trade_no));
                tasks.push(tokio::spawn(async move {
                    let mut tx = pool.begin().await.unwrap();
                    let result = shop.on_paid(&mut tx, &trade_no, 9, false).await;
                    tx.commit().await.unwrap();
                    result
                }));
            }
            for task in tasks {
                assert_eq!(task.await.unwrap(), Ok(90));
            }
            assert_eq!(coupons(&pool, &format!("trade_no = '{trade_no}'")).await, 1);
        }

        #[tokio::test]
        async fn state_machine_applies_once_and_reports_the_rest() {
            let Some((_, pool)) = shop().await else { return };
            let id = order(&pool, "WAIT_PAY").await;
            let mut answers = Vec::new();
            for _ in 0..2 {
                let mut tx = pool.begin().await.unwrap();
                answers.push(mark_paid(&mut tx, id).await);
                tx.commit().await.unwrap();
            }
            assert_eq!(answers, [Ok("granted".to_owned()), Ok("already paid".to_owned())]);
            assert_eq!(coupons(&pool, &format!("order_id = {id}")).await, 1);

            let paying = order(&pool, "PAYING").await;
            let mut tx = pool.begin().await.unwrap();
            assert_eq!(mark_paid(&mut tx, paying).await, Ok("granted".to_owned()));
            tx.commit().await.unwrap();

            let closed = order(&pool, "CLOSED").await;
            let mut tx = pool.begin().await.unwrap();
            assert_eq!(mark_paid(&mut tx, closed).await, Err(AppError::Illegal("CLOSED".into())));
            assert_eq!(mark_paid(&mut tx, unique_id()).await, Err(AppError::NotFound));
            tx.commit().await.unwrap();
            assert_eq!(coupons(&pool, &format!("order_id = {closed}")).await, 0);
        }

        #[tokio::test]
        async fn integer_state_codes() {
            let Some((_, pool)) = shop().await else { return };
            let (paid, closed) = (unique_id(), unique_id());
            let insert = format!(
                "INSERT INTO idem_macro_coded_orders (id, status) VALUES ({paid}, 10), ({closed}, 90)"
            );
            sqlx::query(&insert).execute(&pool).await.unwrap();
            for expected in ["shipped", "already shipped", "already shipped"] {
                let mut tx = pool.begin().await.unwrap();
                assert_eq!(mark_shipped(&mut tx, paid).await, Ok(expected.to_owned()));
                tx.commit().await.unwrap();
            }
            let mut tx = pool.begin().await.unwrap();
            assert_eq!(mark_shipped(&mut tx, closed).await, Err(AppError::Illegal("90".into())));
            tx.commit().await.unwrap();
            assert_eq!(coupons(&pool, &format!("order_id = {paid}")).await, 1);
            assert_eq!(coupons(&pool, &format!("order_id = {closed}")).await, 0);
        }

        #[tokio::test]
        async fn concurrent_transitions_grant_once() {
            let Some((_, pool)) = shop().await else { return };
            let id = order(&pool, "WAIT_PAY").await;
            let mut tasks = Vec::new();
            for _ in 0..DUPLICATES {
                let pool = pool.clone();
                tasks.push(tokio::spawn(async move {
                    let mut tx = pool.begin().await.unwrap();
                    let answer = mark_paid(&mut tx, id).await;
                    tx.commit().await.unwrap();
                    answer
                }));
            }
            let mut granted = 0;
            for task in tasks {
                match task.await.unwrap().unwrap().as_str() {
                    "granted" => granted += 1,
                    other => assert_eq!(other, "already paid"),
                }
            }
            assert_eq!(granted, 1);
            assert_eq!(coupons(&pool, &format!("order_id = {id}")).await, 1);
        }

        #[tokio::test]
        async fn dedup_mode_on_the_sql_store_runs_once() {
            let Some((shop, _pool)) = shop().await else { return };
            let engine = Idempotency::new(Arc::new(shop.store))
                .with_store_timeout(Duration::from_secs(60))
                .with_max_waiters_per_key(DUPLICATES);
            let runs = Arc::new(AtomicUsize::new(0));
            let job = Arc::new(unique("J"));
            let mut tasks = Vec::new();
            for _ in 0..DUPLICATES {
                let (engine, runs, job) = (engine.clone(), Arc::clone(&runs), Arc::clone(&job));
                tasks.push(tokio::spawn(async move { dedup_job(&engine, &job, &runs).await }));
            }
            for task in tasks {
                assert_eq!(task.await.unwrap(), Ok(100));
            }
            assert_eq!(runs.load(Ordering::SeqCst), 1);
        }
    };
}

mod sqlite {
    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};

    /// A fresh database file in the temporary directory, in WAL mode.
    async fn pool() -> Option<sqlx::SqlitePool> {
        // One directory for every test database, easy to remove: idempotency-macros-tests
        // (`.ci/run` empties it before each run).
        let dir = std::env::temp_dir().join("idempotency-macros-tests");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{}.db", super::unique("idem-macros")));
        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(std::time::Duration::from_secs(60));
        match SqlitePoolOptions::new()
            .max_connections(8)
            .acquire_timeout(std::time::Duration::from_secs(60))
            .connect_with(options)
            .await
        {
            Ok(pool) => Some(pool),
            Err(error) => super::unavailable("SQLite", error),
        }
    }

    /// Each test has its own database file: nothing to serialize.
    async fn lock_for_ddl(_tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>) {}

    scenarios!(sqlx::Sqlite, idempotency_sql::SqliteStore, pool);
}

mod postgres {
    use sqlx::postgres::PgPoolOptions;

    async fn pool() -> Option<sqlx::PgPool> {
        let url = std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        match PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(std::time::Duration::from_secs(60))
            .connect(&url)
            .await
        {
            Ok(pool) => Some(pool),
            Err(error) => super::unavailable("PostgreSQL", error),
        }
    }

    /// Tests share the tables: serialize their creation.
    async fn lock_for_ddl(tx: &mut sqlx::Transaction<'_, sqlx::Postgres>) {
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext('idem-macro-tables'))")
            .execute(&mut **tx)
            .await
            .unwrap();
    }

    scenarios!(sqlx::Postgres, idempotency_sql::PostgresStore, pool);
}

mod mysql {
    use sqlx::mysql::MySqlPoolOptions;

    async fn pool() -> Option<sqlx::MySqlPool> {
        let url = std::env::var("MYSQL_URL")
            .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned());
        match MySqlPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(std::time::Duration::from_secs(60))
            .connect(&url)
            .await
        {
            Ok(pool) => Some(pool),
            Err(error) => super::unavailable("MySQL", error),
        }
    }

    /// `CREATE TABLE IF NOT EXISTS` is atomic under MySQL's metadata lock.
    async fn lock_for_ddl(_tx: &mut sqlx::Transaction<'_, sqlx::MySql>) {}

    scenarios!(sqlx::MySql, idempotency_sql::MySqlStore, pool);
}
