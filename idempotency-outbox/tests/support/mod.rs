//! What the outbox tests share: outboxes under fresh tables on every database, enqueueing,
//! names, and the loops that drive a relay.
#![allow(
    dead_code,
    unused_macros,
    unused_imports,
    clippy::unwrap_used,
    clippy::expect_used
)]

pub(crate) mod relay;
pub(crate) mod table;

use std::future::Future;
use std::time::{Duration, Instant};

use idempotency_core::{IdempotencyKey, Scope};
use idempotency_outbox::table::OutboxTable;
use idempotency_outbox::{Outbox, OutboxMessage};
use sqlx::{PgPool, Postgres};

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

pub(crate) fn mysql_url() -> String {
    std::env::var("MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned())
}

pub(crate) fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

pub(crate) fn nats_url() -> String {
    std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned())
}

/// An outbox on one database, as the tests set it up and look into it.
pub(crate) trait TestOutbox: OutboxTable + Sized {
    /// A migrated outbox under a fresh table (`None`: the database is unreachable, skipped
    /// outside CI).
    fn fresh() -> impl Future<Output = Option<Self>>;

    /// Enqueues `messages` in one transaction, committed or rolled back; whether each was
    /// added.
    fn enqueue_then(
        &self,
        messages: &[OutboxMessage],
        commit: bool,
    ) -> impl Future<Output = Vec<bool>>;

    /// The `id` of every row of the archive table `table` whose `archived_at` is set.
    fn archived_ids(&self, table: &str) -> impl Future<Output = Vec<String>>;
}

/// Enqueues `$messages` in the transaction `$tx`, then commits or rolls it back; whether each
/// was added (the same steps on every database, whose transactions differ in type).
macro_rules! enqueue_in {
    ($outbox:expr, $tx:expr, $messages:expr, $commit:expr) => {{
        let mut tx = $tx;
        let mut added = Vec::new();
        for message in $messages {
            added.push($outbox.enqueue(&mut tx, message).await.unwrap());
        }
        if $commit {
            tx.commit().await.unwrap();
        } else {
            tx.rollback().await.unwrap();
        }
        added
    }};
}

/// `SELECT id FROM <table> WHERE archived_at IS NOT NULL` on `pool`, the table quoted by `open`
/// and `close`.
async fn ids_in<DB: sqlx::Database>(
    pool: &sqlx::Pool<DB>,
    table: &str,
    (open, close): (&str, &str),
) -> Vec<String>
where
    for<'c> &'c sqlx::Pool<DB>: sqlx::Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    (String,): for<'r> sqlx::FromRow<'r, DB::Row>,
{
    sqlx::query_scalar(&format!(
        "SELECT id FROM {open}{table}{close} WHERE archived_at IS NOT NULL"
    ))
    .fetch_all(pool)
    .await
    .unwrap()
}

/// A pool on `url` (`None`: `what` is unreachable, skipped outside CI).
async fn connect<DB: sqlx::Database>(url: &str, what: &str) -> Option<sqlx::Pool<DB>> {
    match sqlx::Pool::<DB>::connect(url).await {
        Ok(pool) => Some(pool),
        Err(error) => idempotency_test::unavailable(what, error),
    }
}

impl TestOutbox for Outbox<Postgres> {
    async fn fresh() -> Option<Self> {
        let pool = connect(&database_url(), "PostgreSQL").await?;
        outbox_named(pool, &unique("outbox")).await
    }

    async fn enqueue_then(&self, messages: &[OutboxMessage], commit: bool) -> Vec<bool> {
        enqueue_in!(self, self.pool().begin().await.unwrap(), messages, commit)
    }

    async fn archived_ids(&self, table: &str) -> Vec<String> {
        ids_in(self.pool(), table, ("\"", "\"")).await
    }
}

#[cfg(feature = "mysql")]
impl TestOutbox for Outbox<sqlx::MySql> {
    async fn fresh() -> Option<Self> {
        let pool = connect(&mysql_url(), "MySQL").await?;
        let outbox = Outbox::mysql(pool)
            .with_table_name(&unique("outbox"))
            .unwrap();
        outbox.migrate().await.unwrap();
        Some(outbox)
    }

    async fn enqueue_then(&self, messages: &[OutboxMessage], commit: bool) -> Vec<bool> {
        enqueue_in!(self, self.pool().begin().await.unwrap(), messages, commit)
    }

    async fn archived_ids(&self, table: &str) -> Vec<String> {
        ids_in(self.pool(), table, ("`", "`")).await
    }
}

/// A migrated SQLite outbox in a fresh database file (WAL, a busy timeout for concurrent
/// writers); enqueues in `BEGIN IMMEDIATE` transactions.
#[cfg(feature = "sqlite")]
impl TestOutbox for Outbox<sqlx::Sqlite> {
    async fn fresh() -> Option<Self> {
        use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
        let dir = std::env::temp_dir().join("idempotency-outbox-tests");
        std::fs::create_dir_all(&dir).unwrap();
        let options = SqliteConnectOptions::new()
            .filename(dir.join(format!("{}.db", unique("outbox"))))
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(30));
        let pool = match SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
        {
            Ok(pool) => pool,
            Err(error) => return idempotency_test::unavailable("SQLite", error),
        };
        let outbox = Outbox::sqlite(pool);
        outbox.migrate().await.unwrap();
        Some(outbox)
    }

    async fn enqueue_then(&self, messages: &[OutboxMessage], commit: bool) -> Vec<bool> {
        let tx = self.pool().begin_with("BEGIN IMMEDIATE").await.unwrap();
        enqueue_in!(self, tx, messages, commit)
    }

    async fn archived_ids(&self, table: &str) -> Vec<String> {
        ids_in(self.pool(), table, ("\"", "\"")).await
    }
}

/// A migrated PostgreSQL outbox under a fresh table (`None`: unreachable, skipped outside CI).
pub(crate) async fn fresh_outbox() -> Option<Outbox<Postgres>> {
    Outbox::<Postgres>::fresh().await
}

/// The PostgreSQL outbox `table` in `pool`, migrated.
pub(crate) async fn outbox_named(pool: PgPool, table: &str) -> Option<Outbox<Postgres>> {
    let outbox = Outbox::postgres(pool).with_table_name(table).unwrap();
    outbox.migrate().await.unwrap();
    Some(outbox)
}

/// A fresh outbox holding `messages`, committed.
pub(crate) async fn holding<O: TestOutbox>(messages: &[OutboxMessage]) -> Option<O> {
    let outbox = O::fresh().await?;
    enqueue_committed(&outbox, messages).await;
    Some(outbox)
}

/// Enqueues `messages` in one committed transaction, each new.
pub(crate) async fn enqueue_committed<O: TestOutbox>(outbox: &O, messages: &[OutboxMessage]) {
    let added = outbox.enqueue_then(messages, true).await;
    assert!(added.iter().all(|&added| added), "every message is new");
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

/// Polls `done` until it holds, failing the test after `limit`.
pub(crate) async fn wait_until<F, Fut>(what: &str, limit: Duration, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !done().await {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
