//! The transport-independent part of the two-tier tests (`two_tier.rs`, `two_tier_nats.rs`):
//! Redis as the fast path, PostgreSQL as the truth, and a business table to count rows in.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use idempotency_core::{Idempotency, Scope};
use idempotency_queue::two_tier::{Business, SqlTruth, Tx};
use idempotency_queue::{Handler, Job};
use idempotency_redis::RedisStore;
use idempotency_sql::{PostgresStore, TxStore};
use sqlx::{PgPool, Postgres};

use crate::support::unique;

/// `REDIS_URL` (or the local default) with its database number replaced by `db`.
fn redis_url(db: u8) -> String {
    let base = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let base = base.trim_end_matches('/');
    // Replace any database number in REDIS_URL with ours.
    let host = match base.rsplit_once('/') {
        Some((head, tail)) if !head.ends_with('/') && tail.chars().all(|c| c.is_ascii_digit()) => {
            head
        }
        _ => base,
    };
    format!("{host}/{db}")
}

fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// The two tiers of one test, under names no other test uses.
pub(crate) struct Tiers {
    pool: PgPool,
    dedup_table: String,
    coupons_table: String,
    redis_db: u8,
    redis_prefix: String,
}

impl Tiers {
    /// Checks Redis and PostgreSQL (`None`: skipped, outside CI), then creates the dedup and
    /// business tables. Redis keys go to database `redis_db` under a fresh `prefix`-based prefix.
    pub(crate) async fn new(redis_db: u8, prefix: &str) -> Option<Self> {
        if let Err(error) = RedisStore::connect(&redis_url(redis_db)).await {
            return idempotency_test::unavailable("Redis", error);
        }
        let pool = match PgPool::connect(&database_url()).await {
            Ok(pool) => pool,
            Err(error) => return idempotency_test::unavailable("PostgreSQL", error),
        };
        let id = unique("t").replace('-', "_");
        let tiers = Self {
            pool,
            dedup_table: format!("dedup_{id}"),
            coupons_table: format!("coupons_{id}"),
            redis_db,
            redis_prefix: unique(prefix),
        };
        tiers.truth_store().migrate().await.unwrap();
        sqlx::query(&format!(
            "CREATE TABLE {} (id BIGSERIAL PRIMARY KEY, business_key TEXT NOT NULL)",
            tiers.coupons_table
        ))
        .execute(&tiers.pool)
        .await
        .unwrap();
        Some(tiers)
    }

    /// The environment a child process reads back with [`Tiers::from_env`].
    pub(crate) fn child_env(&self) -> [(&'static str, String); 4] {
        [
            ("IDEM_DEDUP", self.dedup_table.clone()),
            ("IDEM_COUPONS", self.coupons_table.clone()),
            ("IDEM_REDIS_DB", self.redis_db.to_string()),
            ("IDEM_PREFIX", self.redis_prefix.clone()),
        ]
    }

    /// The tiers of a child process, from the parent's [`Tiers::child_env`].
    pub(crate) async fn from_env() -> Self {
        let var = |name: &str| std::env::var(name).unwrap();
        Self {
            pool: PgPool::connect(&database_url()).await.unwrap(),
            dedup_table: var("IDEM_DEDUP"),
            coupons_table: var("IDEM_COUPONS"),
            redis_db: var("IDEM_REDIS_DB").parse().unwrap(),
            redis_prefix: var("IDEM_PREFIX"),
        }
    }

    /// The SQL dedup store (the truth), with a short transaction lease.
    pub(crate) fn truth_store(&self) -> PostgresStore {
        PostgresStore::new(self.pool.clone())
            .with_table_name(&self.dedup_table)
            .unwrap()
            .with_tx_lease(Duration::from_secs(2))
    }

    /// The Redis fast path, with a short lease.
    pub(crate) async fn fast_path(&self) -> Idempotency<RedisStore> {
        self.fast_path_leased(Duration::from_secs(2)).await
    }

    /// The Redis fast path, claims held for `lease`.
    pub(crate) async fn fast_path_leased(&self, lease: Duration) -> Idempotency<RedisStore> {
        let redis = RedisStore::connect(&redis_url(self.redis_db))
            .await
            .unwrap()
            .with_key_prefix(self.redis_prefix.clone());
        Idempotency::new(redis)
            .with_lease(lease)
            .with_ttl(Duration::from_secs(600))
    }

    /// A Redis fast path that shares nothing with [`fast_path`](Self::fast_path) (another
    /// prefix): every key is new to it, as after a flush.
    #[allow(dead_code)] // Used by the lifetime tests only.
    pub(crate) async fn fast_path_elsewhere(&self) -> Idempotency<RedisStore> {
        let redis = RedisStore::connect(&redis_url(self.redis_db))
            .await
            .unwrap()
            .with_key_prefix(format!("{}-elsewhere", self.redis_prefix));
        Idempotency::new(redis)
            .with_lease(Duration::from_secs(2))
            .with_ttl(Duration::from_secs(600))
    }

    /// The Redis fast path through the proxy at `proxy` (`host:port`), as [`fast_path`](Self::fast_path).
    pub(crate) async fn fast_path_through(&self, proxy: &str) -> Idempotency<RedisStore> {
        let redis = RedisStore::connect(&format!("redis://{proxy}/{}", self.redis_db))
            .await
            .unwrap()
            .with_key_prefix(self.redis_prefix.clone());
        Idempotency::new(redis)
            .with_lease(Duration::from_secs(2))
            .with_ttl(Duration::from_secs(600))
    }

    /// The handler: inserts one business row per job, in the SQL claim's transaction; its
    /// output is the row's id.
    pub(crate) fn truth(
        &self,
    ) -> SqlTruth<PostgresStore, Job, impl Business<Postgres, Job, Output = i64, Error = sqlx::Error>>
    {
        self.truth_with_store(self.truth_store())
    }

    /// [`truth`](Self::truth) on `store` (the truth's table, set otherwise).
    pub(crate) fn truth_with_store(
        &self,
        store: PostgresStore,
    ) -> SqlTruth<PostgresStore, Job, impl Business<Postgres, Job, Output = i64, Error = sqlx::Error>>
    {
        let insert = format!(
            "INSERT INTO {} (business_key) VALUES ($1) RETURNING id",
            self.coupons_table
        );
        SqlTruth::new(
            store,
            Scope::new("coupon-grant"),
            move |tx: Tx<Postgres>, job: Job| {
                let insert = insert.clone();
                async move {
                    sqlx::query_scalar::<_, i64>(&insert)
                        .bind(job.key.as_str())
                        .fetch_one(&mut *tx.conn().await)
                        .await
                }
            },
        )
    }

    /// The handler of a child process: runs the SQL claim and insert, then hangs before commit
    /// (`mode` `in_tx`) or after it (`after_commit`), printing `CHILD-READY {mode}` first.
    pub(crate) fn hanging_handler(&self, mode: String) -> impl Handler<Error = String> {
        let truth = Arc::new(self.truth());
        let table = self.coupons_table.clone();
        move |job: Job| {
            let truth = Arc::clone(&truth);
            let (mode, table) = (mode.clone(), table.clone());
            async move {
                if mode == "in_tx" {
                    // The same SQL claim and insert, then stop before commit.
                    let mut tx = truth.store().begin().await.unwrap();
                    let claim = TxStore::claim_key_in_tx(
                        truth.store(),
                        &mut tx,
                        &Scope::new("coupon-grant"),
                        idempotency_core::Mechanism::Message,
                        job.key.as_str(),
                        &job.fingerprint,
                        None,
                    )
                    .await
                    .unwrap();
                    assert!(matches!(claim, idempotency_sql::TxClaim::Execute(_)));
                    sqlx::query(&format!("INSERT INTO {table} (business_key) VALUES ($1)"))
                        .bind(job.key.as_str())
                        .execute(&mut *tx)
                        .await
                        .unwrap();
                    println!("CHILD-READY in_tx");
                } else {
                    truth.handle(job).await.map_err(|e| e.to_string())?;
                    println!("CHILD-READY after_commit");
                }
                std::future::pending::<Result<(), String>>().await
            }
        }
    }

    /// The pool of the business and dedup tables.
    #[allow(dead_code)] // Used by the RabbitMQ tests only.
    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The truth's dedup table.
    #[allow(dead_code)] // Used by the lifetime tests only.
    pub(crate) fn dedup_table(&self) -> &str {
        &self.dedup_table
    }

    /// The business table.
    #[allow(dead_code)] // Used by the RabbitMQ tests only.
    pub(crate) fn coupons_table(&self) -> &str {
        &self.coupons_table
    }

    /// Business rows, for `key` or in all.
    pub(crate) async fn rows(&self, key: Option<&str>) -> i64 {
        sqlx::query_scalar(&format!(
            "SELECT COUNT(*) FROM {} WHERE $1::TEXT IS NULL OR business_key = $1",
            self.coupons_table
        ))
        .bind(key)
        .fetch_one(&self.pool)
        .await
        .unwrap()
    }

    /// Empties the Redis database, which must be `dedicated` (the test file's own database).
    pub(crate) async fn flush_redis(&self, dedicated: u8) {
        assert_eq!(
            self.redis_db, dedicated,
            "only the dedicated database is flushed"
        );
        let client = redis::Client::open(redis_url(self.redis_db)).unwrap();
        let mut connection = client.get_multiplexed_async_connection().await.unwrap();
        let () = redis::cmd("FLUSHDB")
            .query_async(&mut connection)
            .await
            .unwrap();
    }

    /// Drops the business and dedup tables.
    pub(crate) async fn drop_tables(&self) {
        for table in [&self.coupons_table, &self.dedup_table] {
            sqlx::query(&format!("DROP TABLE IF EXISTS {table}"))
                .execute(&self.pool)
                .await
                .unwrap();
        }
    }
}
