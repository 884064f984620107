//! The two databases, the tables and the queue of one demo run, named by its run id.

use std::str::FromStr;

use idempotency_outbox::Outbox;
use idempotency_sql::PostgresStore;
use lapin::options::{QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, Postgres};

use crate::Error;

/// The callback service's database.
const ORDERS_DB: &str = "outbox_demo_orders";
/// The coupon service's database.
const COUPONS_DB: &str = "outbox_demo_coupons";
/// The environment variable that hands the run id to the child processes.
pub(crate) const RUN_ENV: &str = "OUTBOX_DEMO_RUN";

/// Where the services are: `DATABASE_URL` (any database on the server) and `AMQP_URL`.
pub(crate) fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// RabbitMQ.
pub(crate) fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

/// The names of one run's tables and queue.
#[derive(Clone, Debug)]
pub(crate) struct Run {
    pub(crate) id: String,
}

impl Run {
    /// A run under a fresh id.
    pub(crate) fn fresh() -> Result<Self, Error> {
        let mut bytes = [0u8; 4];
        getrandom::fill(&mut bytes).map_err(|error| Error::Usage(error.to_string()))?;
        Ok(Self {
            id: bytes.iter().map(|b| format!("{b:02x}")).collect(),
        })
    }

    /// The run a child process was started for.
    pub(crate) fn from_env() -> Result<Self, Error> {
        let id =
            std::env::var(RUN_ENV).map_err(|_| Error::Usage(format!("{RUN_ENV} is not set")))?;
        Ok(Self { id })
    }

    pub(crate) fn orders_table(&self) -> String {
        format!("orders_{}", self.id)
    }

    pub(crate) fn outbox_table(&self) -> String {
        format!("outbox_{}", self.id)
    }

    pub(crate) fn coupons_table(&self) -> String {
        format!("coupons_{}", self.id)
    }

    pub(crate) fn dedup_table(&self) -> String {
        format!("coupon_dedup_{}", self.id)
    }

    /// The queue the relay publishes coupon grants to (the default exchange routes by name).
    pub(crate) fn queue(&self) -> String {
        format!("outbox_demo.coupon_grant.{}", self.id)
    }
}

/// A pool on the server's database `name`, created if missing.
async fn database(name: &str) -> Result<PgPool, Error> {
    let server = PgConnectOptions::from_str(&database_url())?;
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(server.clone())
        .await?;
    let exists: Option<i32> = sqlx::query_scalar("SELECT 1 FROM pg_database WHERE datname = $1")
        .bind(name)
        .fetch_optional(&admin)
        .await?;
    if exists.is_none() {
        match sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&admin)
            .await
        {
            Ok(_) => {}
            // Another run created it meanwhile.
            Err(sqlx::Error::Database(error)) if error.code().as_deref() == Some("42P04") => {}
            Err(error) => return Err(error.into()),
        }
    }
    admin.close().await;
    Ok(PgPoolOptions::new()
        .max_connections(8)
        .connect_with(server.database(name))
        .await?)
}

/// The callback service's side: the orders database with its orders and its outbox.
pub(crate) struct OrdersDb {
    pub(crate) pool: PgPool,
    pub(crate) outbox: Outbox<Postgres>,
    pub(crate) orders: String,
}

/// The coupon service's side: its own database with coupons and the consumer's dedup records.
pub(crate) struct CouponsDb {
    pub(crate) pool: PgPool,
    pub(crate) truth: PostgresStore,
    pub(crate) coupons: String,
}

impl OrdersDb {
    /// Connects (the tables exist once [`create`] ran).
    pub(crate) async fn open(run: &Run) -> Result<Self, Error> {
        let pool = database(ORDERS_DB).await?;
        let outbox = Outbox::postgres(pool.clone()).with_table_name(&run.outbox_table())?;
        Ok(Self {
            pool,
            outbox,
            orders: run.orders_table(),
        })
    }
}

impl CouponsDb {
    /// Connects (the tables exist once [`create`] ran).
    pub(crate) async fn open(run: &Run) -> Result<Self, Error> {
        let pool = database(COUPONS_DB).await?;
        let truth = PostgresStore::new(pool.clone()).with_table_name(&run.dedup_table())?;
        Ok(Self {
            pool,
            truth,
            coupons: run.coupons_table(),
        })
    }

    /// Coupons granted for `trade`.
    pub(crate) async fn coupons_of(&self, trade: &str) -> Result<i64, Error> {
        Ok(sqlx::query_scalar(&format!(
            "SELECT count(*) FROM {} WHERE trade_no = $1",
            self.coupons
        ))
        .bind(trade)
        .fetch_one(&self.pool)
        .await?)
    }
}

/// Creates both databases' tables, the orders of `trades` (pending payment) and the queue.
pub(crate) async fn create(run: &Run, trades: &[&str]) -> Result<(OrdersDb, CouponsDb), Error> {
    let orders = OrdersDb::open(run).await?;
    sqlx::query(&format!(
        "CREATE TABLE {} (trade_no TEXT PRIMARY KEY, user_id BIGINT NOT NULL, \
         state TEXT NOT NULL DEFAULT 'pending')",
        orders.orders
    ))
    .execute(&orders.pool)
    .await?;
    for (user, trade) in (1_i64..).zip(trades) {
        sqlx::query(&format!(
            "INSERT INTO {} (trade_no, user_id) VALUES ($1, $2)",
            orders.orders
        ))
        .bind(trade)
        .bind(user)
        .execute(&orders.pool)
        .await?;
    }
    orders.outbox.migrate().await?;

    let coupons = CouponsDb::open(run).await?;
    // No unique constraint on the trade: a second grant would show as a second row.
    sqlx::query(&format!(
        "CREATE TABLE {} (id BIGSERIAL PRIMARY KEY, trade_no TEXT NOT NULL, \
         user_id BIGINT NOT NULL)",
        coupons.coupons
    ))
    .execute(&coupons.pool)
    .await?;
    coupons.truth.migrate().await?;

    let amqp = Connection::connect(&amqp_url(), ConnectionProperties::default()).await?;
    let channel = amqp.create_channel().await?;
    channel
        .queue_declare(
            run.queue().as_str().into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await?;
    amqp.close(200, "declared".into()).await?;
    Ok((orders, coupons))
}

/// Drops the run's tables and queue.
pub(crate) async fn drop_all(
    run: &Run,
    orders: &OrdersDb,
    coupons: &CouponsDb,
) -> Result<(), Error> {
    for table in [run.orders_table(), run.outbox_table()] {
        sqlx::query(&format!("DROP TABLE IF EXISTS {table}"))
            .execute(&orders.pool)
            .await?;
    }
    for table in [run.coupons_table(), run.dedup_table()] {
        sqlx::query(&format!("DROP TABLE IF EXISTS {table}"))
            .execute(&coupons.pool)
            .await?;
    }
    for (pool, table) in [
        (&orders.pool, run.outbox_table()),
        (&coupons.pool, run.dedup_table()),
    ] {
        sqlx::query("DELETE FROM idempotency_schema WHERE table_name = $1")
            .bind(table)
            .execute(pool)
            .await?;
    }
    let amqp = Connection::connect(&amqp_url(), ConnectionProperties::default()).await?;
    let channel = amqp.create_channel().await?;
    let dead = idempotency_queue::rabbitmq::dead_letter_name(&run.queue());
    for queue in [run.queue(), dead.clone()] {
        channel
            .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
            .await?;
    }
    channel
        .exchange_delete(
            dead.as_str().into(),
            lapin::options::ExchangeDeleteOptions::default(),
        )
        .await?;
    amqp.close(200, "cleaned up".into()).await?;
    Ok(())
}
