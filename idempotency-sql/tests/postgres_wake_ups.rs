//! Duplicates waiting in one instance for a key another instance runs are woken by PostgreSQL
//! (`LISTEN`/`NOTIFY` on the table's channel, for records a waiter flagged), not by their poll:
//! the tests poll every 400 s (the first read without wake-ups comes after 1/32 of it, 12.5 s)
//! and want their answer within 10 s. Two instances are two stores with pools of their own on
//! one table (`DATABASE_URL`).
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use idempotency_core::{
    Decision, Execution, Fingerprint, Idempotency, InFlightPolicy, Namespace, Outcome, Scope,
    StorageKey,
};
use idempotency_sql::PostgresStore;
use idempotency_test::{unavailable, unique_key};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio::task::JoinHandle;

/// Far beyond the answer's bound, and so is 1/32 of it: only a wake-up answers in time.
const POLL: Duration = Duration::from_secs(400);
/// How long a woken waiter may take to be answered, generous for a busy machine.
const ANSWERED_WITHIN: Duration = Duration::from_secs(10);

fn url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

async fn pool() -> Option<PgPool> {
    match PgPoolOptions::new()
        .max_connections(4)
        .connect(&url())
        .await
    {
        Ok(pool) => Some(pool),
        Err(error) => unavailable("PostgreSQL", error),
    }
}

/// Two instances on one fresh table: the owner, and the waiting one (polling every `poll`).
async fn instances(
    poll: Duration,
) -> Option<(
    Idempotency<PostgresStore>,
    Idempotency<PostgresStore>,
    PgPool,
)> {
    let table = format!("idem_wake_{}", &unique_key().to_hex()[..12]);
    let (a, b) = (pool().await?, pool().await?);
    let owner = PostgresStore::new(a.clone())
        .with_table_name(&table)
        .unwrap();
    owner.migrate().await.unwrap();
    let waiting = PostgresStore::new(b).with_table_name(&table).unwrap();
    let owner = Idempotency::new(owner).with_keep_alive(false, Duration::from_secs(600));
    Some((
        owner,
        Idempotency::new(waiting).with_in_flight_poll(poll),
        a,
    ))
}

async fn drop_table(pool: &PgPool, engine: &Idempotency<PostgresStore>) {
    let table = engine.store().table_name();
    sqlx::raw_sql(&format!(
        "DROP TABLE {table}; DROP SEQUENCE \"{table}_token_seq\""
    ))
    .execute(pool)
    .await
    .unwrap();
}

fn scope() -> Scope {
    Namespace::new("wake-ups").scope()
}

fn fingerprint() -> Fingerprint {
    Fingerprint::of_bytes(b"order 42")
}

/// Claims a new key in `owner`.
async fn claimed(owner: &Idempotency<PostgresStore>) -> (StorageKey, Execution<PostgresStore>) {
    idempotency_test::executing(owner, &scope(), &fingerprint()).await
}

/// A duplicate of `key` waiting in `engine` (up to a minute).
fn duplicate(
    engine: &Idempotency<PostgresStore>,
    key: StorageKey,
) -> JoinHandle<Decision<PostgresStore>> {
    let engine = engine.clone();
    tokio::spawn(async move {
        let wait = InFlightPolicy::wait(Duration::from_secs(60));
        engine
            .claim(&scope(), key, &fingerprint(), wait)
            .await
            .unwrap()
    })
}

/// Whether the record of `key` carries a waiter's flag: `None` if it has no record.
async fn flagged(
    pool: &PgPool,
    engine: &Idempotency<PostgresStore>,
    key: &StorageKey,
) -> Option<bool> {
    let table = engine.store().table_name();
    let query = format!("SELECT waited IS TRUE FROM {table} WHERE key_hash = $1");
    sqlx::query_scalar(&query)
        .bind(key.0.as_slice())
        .fetch_optional(pool)
        .await
        .unwrap()
}

/// Waits until the waiter has flagged the record: its listener is live, its read comes next.
async fn until_flagged(pool: &PgPool, engine: &Idempotency<PostgresStore>, key: &StorageKey) {
    while flagged(pool, engine, key).await != Some(true) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The duplicate's answer, which must come well before the poll.
async fn answer(duplicate: JoinHandle<Decision<PostgresStore>>) -> Decision<PostgresStore> {
    tokio::time::timeout(ANSWERED_WITHIN, duplicate)
        .await
        .expect("answered by the wake-up, not the poll")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_elsewhere_gets_the_outcome_when_the_owner_completes() {
    let Some((a, b, pool)) = instances(POLL).await else {
        return;
    };
    // An unwaited completion leaves no flag (and so sends no `NOTIFY`).
    let (quiet, execution) = claimed(&a).await;
    execution.complete(Outcome::new(201, "paid")).await.unwrap();
    assert_eq!(flagged(&pool, &a, &quiet).await, Some(false));

    let (key, execution) = claimed(&a).await;
    let waiting = duplicate(&b, key);
    until_flagged(&pool, &a, &key).await;
    execution.complete(Outcome::new(201, "paid")).await.unwrap();
    match answer(waiting).await {
        Decision::Replay(outcome) => assert_eq!(outcome, Outcome::new(201, "paid")),
        other => panic!("the owner's outcome, got {other:?}"),
    }
    drop_table(&pool, &a).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_the_waiters_elsewhere_and_one_claims() {
    let Some((a, b, pool)) = instances(POLL).await else {
        return;
    };
    let (key, execution) = claimed(&a).await;
    let waiters: Vec<_> = (0..3).map(|_| duplicate(&b, key)).collect();
    until_flagged(&pool, &a, &key).await;
    execution.release().await.unwrap();
    // Each answer on its own: the waiter that claims completes, which answers the others.
    let answers: Vec<_> = waiters
        .into_iter()
        .map(|waiter| {
            tokio::spawn(async move {
                match answer(waiter).await {
                    Decision::Execute(execution) => {
                        execution.complete(Outcome::new(201, "paid")).await.unwrap();
                        1
                    }
                    Decision::Replay(outcome) => {
                        assert_eq!(outcome, Outcome::new(201, "paid"));
                        0
                    }
                    other => panic!("a claim or the replay of its outcome, got {other:?}"),
                }
            })
        })
        .collect();
    let mut executed = 0;
    for answered in answers {
        executed += answered.await.unwrap();
    }
    assert_eq!(executed, 1, "one waiter runs the released key");
    drop_table(&pool, &a).await;
}

/// An operator's fenced delete of a record in flight notifies its waiters too: one claims.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_delete_wakes_the_waiters_elsewhere() {
    use idempotency_operations::Operations;

    let Some((a, b, pool)) = instances(POLL).await else {
        return;
    };
    let (key, execution) = claimed(&a).await;
    let waiting = duplicate(&b, key);
    until_flagged(&pool, &a, &key).await;
    let deleted = a.store().delete_fenced(&key, execution.token()).await;
    assert!(deleted.unwrap(), "the record was the one listed");
    match answer(waiting).await {
        Decision::Execute(execution) => {
            execution.complete(Outcome::new(201, "paid")).await.unwrap();
        }
        other => panic!("the waiter claims a deleted key, got {other:?}"),
    }
    drop(execution);
    drop_table(&pool, &a).await;
}

/// The listener's connection is killed: the waiters lose their wake-ups and poll (from 1/32 of
/// a 32-s poll, 1 s, doubling: without the fallback they would wait 32 s), and a later wait is
/// woken by the listener, connected and listening again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_listener_falls_back_to_polling_and_listens_again() {
    let Some((a, b, pool)) = instances(Duration::from_secs(32)).await else {
        return;
    };
    let (key, execution) = claimed(&a).await;
    let waiting = duplicate(&b, key);
    until_flagged(&pool, &a, &key).await;
    // `pg_listening_channels()` shows a session's own channels only: the listener is the
    // session whose last statement was its `LISTEN`.
    let listen = format!("LISTEN \"{}\"", a.store().table_name());
    let terminated: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1",
    )
    .bind(&listen)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(terminated, [true], "one listener for the waiting store");
    execution.complete(Outcome::new(201, "paid")).await.unwrap();
    match answer(waiting).await {
        Decision::Replay(outcome) => assert_eq!(outcome, Outcome::new(201, "paid")),
        other => panic!("the owner's outcome, got {other:?}"),
    }

    // Listening again: a new wait is woken, where its subscribed poll would take 32 s.
    let (key, execution) = claimed(&a).await;
    let waiting = duplicate(&b, key);
    until_flagged(&pool, &a, &key).await;
    execution.complete(Outcome::new(201, "paid")).await.unwrap();
    match answer(waiting).await {
        Decision::Replay(outcome) => assert_eq!(outcome, Outcome::new(201, "paid")),
        other => panic!("the owner's outcome, got {other:?}"),
    }
    drop_table(&pool, &a).await;
}
