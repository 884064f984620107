//! What the outbox tests share: outboxes under fresh tables, enqueueing, names.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub(crate) mod table;

use std::time::{Duration, Instant};

use idempotency_core::sql::{Outbox, OutboxMessage};
use idempotency_core::{IdempotencyKey, Scope};
#[cfg(feature = "mysql")]
use sqlx::{MySql, MySqlPool};
use sqlx::{PgPool, Postgres};
#[cfg(feature = "sqlite")]
use sqlx::{Sqlite, SqlitePool};

/// A name no other test run uses: `prefix` and 12 hex digits (a valid SQL identifier).
pub(crate) fn unique(prefix: &str) -> String {
    let mut bytes = [0u8; 6];
    getrandom::fill(&mut bytes).unwrap();
    format!("{prefix}_{}", hex::encode(bytes))
}

pub(crate) fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

pub(crate) fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

pub(crate) fn nats_url() -> String {
    std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned())
}

/// A migrated outbox under a fresh table (`None`: PostgreSQL unreachable, skipped outside CI).
pub(crate) async fn fresh_outbox() -> Option<Outbox<Postgres>> {
    let pool = match PgPool::connect(&database_url()).await {
        Ok(pool) => pool,
        Err(error) => return idempotency_core::testing::unavailable("PostgreSQL", error),
    };
    outbox_named(pool, &unique("outbox")).await
}

/// The outbox `table` in `pool`, migrated.
pub(crate) async fn outbox_named(pool: PgPool, table: &str) -> Option<Outbox<Postgres>> {
    let outbox = Outbox::postgres(pool).with_table_name(table).unwrap();
    outbox.migrate().await.unwrap();
    Some(outbox)
}

/// The message of business key `key` to `topic`.
pub(crate) fn message(key: &str, topic: &str) -> OutboxMessage {
    let key = IdempotencyKey::parse(key).unwrap();
    OutboxMessage::new(
        &Scope::new("outbox-test"),
        &key,
        topic,
        format!("payload of {key}"),
    )
}

/// Enqueues `messages` in one committed transaction.
pub(crate) async fn enqueue_committed(outbox: &Outbox<Postgres>, messages: &[OutboxMessage]) {
    let mut tx = outbox.pool().begin().await.unwrap();
    for message in messages {
        assert!(outbox.enqueue(&mut tx, message).await.unwrap());
    }
    tx.commit().await.unwrap();
}

/// Polls `done` until it holds, failing the test after `limit`.
pub(crate) async fn wait_until<F, Fut>(what: &str, limit: Duration, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !done().await {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(crate) fn mysql_url() -> String {
    std::env::var("MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned())
}

#[cfg(feature = "mysql")]
/// A migrated MySQL/MariaDB outbox under a fresh table (`None`: unreachable, skipped outside CI).
pub(crate) async fn fresh_mysql() -> Option<Outbox<MySql>> {
    let pool = match MySqlPool::connect(&mysql_url()).await {
        Ok(pool) => pool,
        Err(error) => return idempotency_core::testing::unavailable("MySQL", error),
    };
    let outbox = Outbox::mysql(pool)
        .with_table_name(&unique("outbox"))
        .unwrap();
    outbox.migrate().await.unwrap();
    Some(outbox)
}

/// A migrated SQLite outbox in a fresh database file (WAL, a busy timeout for concurrent
#[cfg(feature = "sqlite")]
/// writers).
pub(crate) async fn fresh_sqlite() -> Option<Outbox<Sqlite>> {
    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
    let dir = std::env::temp_dir().join("idempotency-outbox-tests");
    std::fs::create_dir_all(&dir).unwrap();
    let options = SqliteConnectOptions::new()
        .filename(dir.join(format!("{}.db", unique("outbox"))))
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(30));
    let pool: SqlitePool = match SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await
    {
        Ok(pool) => pool,
        Err(error) => return idempotency_core::testing::unavailable("SQLite", error),
    };
    let outbox = Outbox::sqlite(pool);
    outbox.migrate().await.unwrap();
    Some(outbox)
}

#[cfg(feature = "mysql")]
/// Enqueues `messages` in one committed MySQL transaction.
pub(crate) async fn enqueue_committed_mysql(outbox: &Outbox<MySql>, messages: &[OutboxMessage]) {
    let mut tx = outbox.pool().begin().await.unwrap();
    for message in messages {
        assert!(outbox.enqueue(&mut tx, message).await.unwrap());
    }
    tx.commit().await.unwrap();
}

#[cfg(feature = "sqlite")]
/// Enqueues `messages` in one committed SQLite transaction (`BEGIN IMMEDIATE`).
pub(crate) async fn enqueue_committed_sqlite(outbox: &Outbox<Sqlite>, messages: &[OutboxMessage]) {
    let mut tx = outbox.pool().begin_with("BEGIN IMMEDIATE").await.unwrap();
    for message in messages {
        assert!(outbox.enqueue(&mut tx, message).await.unwrap());
    }
    tx.commit().await.unwrap();
}
