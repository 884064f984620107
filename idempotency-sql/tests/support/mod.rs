//! Scenarios shared by the SQL store tests: transactional dedup and state machines, written
//! once over any sqlx database, run against the real servers by `postgres.rs`,
//! `mysql.rs` and `sqlite.rs`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    unreachable_pub,
    dead_code
)]

mod migrations;
pub mod operations;
mod purge;
mod transitions;
mod upgrade;

pub(crate) use migrations::store_scenario_tests;
pub use migrations::*;
pub use purge::*;
pub(crate) use transitions::transition_tests;
pub use transitions::*;
pub use upgrade::*;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use idempotency_core::{
    Claim, ClaimRequest, Fingerprint, IdempotencyKey, Mechanism, Outcome, RecordState, Scope,
    Store, StoreError,
};
use idempotency_sql::function::TransitionExecutor;
use idempotency_sql::{
    ListFilter, SCHEMA_TABLE, SCHEMA_VERSION, Transition, TransitionOutcome, TxClaim, TxStore,
};
use idempotency_test::{Walk, concurrently, unique_key};
use sqlx::{Database, Executor, IntoArguments, Pool};

/// A test of the including file running the shared scenario `operations::$scenario` (which
/// returns the tables it made) on a fresh table of that file's database (its `fresh`), the
/// tables dropped by `$drop` once it passed.
#[macro_export]
macro_rules! on_a_fresh_table {
    ($scenario:ident, $drop:path) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $scenario() {
            let Some((store, pool, coupons)) = fresh(4).await else {
                return;
            };
            let mut tables = support::operations::$scenario(store.clone(), pool.clone()).await;
            tables.extend([store.table_name().to_owned(), coupons]);
            $drop(&pool, &tables).await;
        }
    };
}

/// A pool of one connection to `url` whose session ran `setup` (a session setting: a clock
/// ahead, a search path). A test that loses the setting sees the host's clock and fails.
pub async fn pool_with_setup<DB: TransitionDb>(url: &str, setup: &str) -> Pool<DB> {
    let pool = sqlx::pool::PoolOptions::<DB>::new()
        .max_connections(1)
        .connect(url)
        .await
        .unwrap();
    DB::run(&pool, setup).await;
    pool
}

/// A fresh name for a per-test table.
pub fn unique_table(prefix: &str) -> String {
    format!("{prefix}_{}", &unique_key().to_hex()[..12])
}

/// What one transactional callback did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    Executed,
    Replayed(Outcome),
    InFlight,
    Mismatch,
}

/// The payment callback done right: claim the trade number and grant the coupon in one
/// transaction. `rollback` makes the owner fail after its business write (a crash).
pub async fn callback_in_tx<S>(
    store: &S,
    pool: &Pool<S::Database>,
    coupons: &str,
    trade_no: &str,
    rollback: bool,
) -> Result<Seen, idempotency_core::StoreError>
where
    S: TxStore,
    for<'c> &'c mut <S::Database as Database>::Connection: Executor<'c, Database = S::Database>,
    for<'q> <S::Database as Database>::Arguments<'q>: IntoArguments<'q, S::Database>,
{
    let scope = Scope::new("pay.callback");
    let key = IdempotencyKey::parse(trade_no).unwrap();
    let fingerprint = Fingerprint::of_bytes(trade_no.as_bytes());
    let mut tx = pool.begin().await.unwrap();
    let claim = match store.claim_in_tx(&mut tx, &scope, &key, &fingerprint).await {
        Ok(claim) => claim,
        // The database gave up on this transaction (MySQL reports a deadlock among waiters
        // when the owner rolls back): nothing of it stays; the caller retries it.
        Err(error) if error.is_transient() => return Err(error),
        Err(error) => panic!("claim failed: {error}"),
    };
    let seen = match claim {
        TxClaim::Execute(lease) => {
            let grant = format!("INSERT INTO {coupons} (trade_no) VALUES ('{trade_no}')");
            sqlx::query(&grant).execute(&mut *tx).await.unwrap();
            store
                .complete_in_tx(&mut tx, lease, &Outcome::new(200, "coupon granted"))
                .await
                .unwrap();
            Seen::Executed
        }
        TxClaim::Replay(outcome) => Seen::Replayed(outcome),
        TxClaim::InFlight { .. } => Seen::InFlight,
        TxClaim::Mismatch => Seen::Mismatch,
    };
    if rollback {
        drop(tx);
    } else {
        tx.commit().await.unwrap();
    }
    Ok(seen)
}

/// A caller that retries its whole transaction when the database aborted it (a transient
/// error), as every caller of a transactional claim must.
pub async fn callback_retrying<S>(
    store: &S,
    pool: &Pool<S::Database>,
    coupons: &str,
    trade_no: &str,
) -> Seen
where
    S: TxStore,
    for<'c> &'c mut <S::Database as Database>::Connection: Executor<'c, Database = S::Database>,
    for<'q> <S::Database as Database>::Arguments<'q>: IntoArguments<'q, S::Database>,
{
    for _ in 0..20 {
        match callback_in_tx(store, pool, coupons, trade_no, false).await {
            Ok(seen) => return seen,
            Err(error) => eprintln!("retrying an aborted transaction: {error}"),
        }
    }
    panic!("20 aborted transactions in a row");
}

pub async fn count<DB>(pool: &Pool<DB>, sql: &str) -> i64
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    i64: sqlx::Type<DB> + for<'r> sqlx::Decode<'r, DB>,
    (i64,): for<'r> sqlx::FromRow<'r, DB::Row>,
{
    let mut conn = pool.acquire().await.unwrap();
    let (n,): (i64,) = sqlx::query_as(sql).fetch_one(&mut *conn).await.unwrap();
    n
}

/// 200 duplicate callbacks in 200 concurrent transactions: exactly one grants a coupon, every
/// other one replays its committed outcome, and there is one coupon row.
pub async fn tx_storm<S>(store: S, pool: Pool<S::Database>, coupons: String)
where
    S: TxStore + Clone,
    for<'c> &'c mut <S::Database as Database>::Connection: Executor<'c, Database = S::Database>,
    for<'q> <S::Database as Database>::Arguments<'q>: IntoArguments<'q, S::Database>,
    i64: sqlx::Type<S::Database> + for<'r> sqlx::Decode<'r, S::Database>,
    (i64,): for<'r> sqlx::FromRow<'r, <S::Database as Database>::Row>,
{
    const CALLERS: usize = 200;
    let trade_no = format!("T{}", &unique_key().to_hex()[..16]);
    let seen = concurrently(CALLERS, |_| {
        let (store, pool, coupons, trade_no) = (
            store.clone(),
            pool.clone(),
            coupons.clone(),
            trade_no.clone(),
        );
        async move { callback_retrying(&store, &pool, &coupons, &trade_no).await }
    })
    .await;
    let executed = seen.iter().filter(|s| **s == Seen::Executed).count();
    assert_eq!(
        executed, 1,
        "exactly one of {CALLERS} transactions runs the business code"
    );
    let granted = Outcome::new(200, "coupon granted");
    assert!(
        seen.iter()
            .all(|s| *s == Seen::Executed || *s == Seen::Replayed(granted.clone())),
        "every duplicate replays the committed outcome: {seen:?}"
    );
    let sql = format!("SELECT COUNT(*) FROM {coupons} WHERE trade_no = '{trade_no}'");
    assert_eq!(
        count(&pool, &sql).await,
        1,
        "one coupon, whatever the retries"
    );
}

/// A first copy written the way a queue's record of truth writes it: the coupon first, the
/// record last (`record_in_tx`), completed in the same statement or two. Retries an aborted
/// transaction as [`callback_retrying`] does. `None`: written and committed; otherwise what
/// the record said, the coupon rolled back.
pub async fn recorded_last<S>(
    store: &S,
    coupons: &str,
    trade_no: &str,
    payload: &str,
) -> Option<TxClaim>
where
    S: TxStore,
    for<'c> &'c mut <S::Database as Database>::Connection: Executor<'c, Database = S::Database>,
    for<'q> <S::Database as Database>::Arguments<'q>: IntoArguments<'q, S::Database>,
{
    let scope = Scope::new("coupon-grant");
    let fingerprint = Fingerprint::of_bytes(payload.as_bytes());
    let ttl = Duration::from_secs(3600);
    for _ in 0..20 {
        let mut tx = store.begin().await.unwrap();
        let grant = format!("INSERT INTO {coupons} (trade_no) VALUES ('{trade_no}')");
        sqlx::query(&grant).execute(&mut *tx).await.unwrap();
        let outcome = Outcome::new(0, format!("coupon for {payload}"));
        let found = store
            .record_in_tx(
                &mut tx,
                &scope,
                Mechanism::Message,
                trade_no,
                &fingerprint,
                Some(ttl),
                &outcome,
            )
            .await;
        match found {
            Ok(None) => {
                tx.commit().await.unwrap();
                return None;
            }
            Ok(Some(found)) => {
                tx.rollback().await.unwrap();
                return Some(found);
            }
            Err(error) if error.is_transient() => {
                eprintln!("retrying an aborted transaction: {error}")
            }
            Err(error) => panic!("record_in_tx failed: {error}"),
        }
    }
    panic!("20 aborted transactions in a row");
}

/// Records written last, after the business writes (`record_in_tx`, a queue's first copies):
/// of 20 concurrent first copies of one key exactly one commits its coupon and record, the
/// others wait on its record, then roll back and replay its outcome; a later copy replays;
/// another payload is a mismatch; the record is completed, kept its TTL.
pub async fn tx_record_written_last<S>(store: S, pool: Pool<S::Database>, coupons: String)
where
    S: TxStore + Clone,
    for<'c> &'c mut <S::Database as Database>::Connection: Executor<'c, Database = S::Database>,
    for<'q> <S::Database as Database>::Arguments<'q>: IntoArguments<'q, S::Database>,
    i64: sqlx::Type<S::Database> + for<'r> sqlx::Decode<'r, S::Database>,
    (i64,): for<'r> sqlx::FromRow<'r, <S::Database as Database>::Row>,
{
    const COPIES: usize = 20;
    let trade_no = format!("T{}", &unique_key().to_hex()[..16]);
    let found = concurrently(COPIES, |_| {
        let (store, coupons, trade_no) = (store.clone(), coupons.clone(), trade_no.clone());
        async move { recorded_last(&store, &coupons, &trade_no, "paid").await }
    })
    .await;
    let outcome = Outcome::new(0, "coupon for paid");
    let written = found.iter().filter(|found| found.is_none()).count();
    assert_eq!(written, 1, "one copy commits: {found:?}");
    assert!(
        found
            .iter()
            .flatten()
            .all(|found| matches!(found, TxClaim::Replay(replayed) if *replayed == outcome)),
        "every other copy replays the committed outcome: {found:?}"
    );
    let sql = format!("SELECT COUNT(*) FROM {coupons} WHERE trade_no = '{trade_no}'");
    assert_eq!(count(&pool, &sql).await, 1, "one coupon");

    let later = recorded_last(&store, &coupons, &trade_no, "paid").await;
    assert!(
        matches!(later, Some(TxClaim::Replay(ref replayed)) if *replayed == outcome),
        "{later:?}"
    );
    let other = recorded_last(&store, &coupons, &trade_no, "refunded").await;
    assert!(matches!(other, Some(TxClaim::Mismatch)), "{other:?}");
    assert_eq!(count(&pool, &sql).await, 1, "still one coupon");

    let key = Scope::new("coupon-grant").storage_key_for(Mechanism::Message, &trade_no);
    let record = store.get(&key).await.unwrap().expect("committed");
    assert_eq!(record.state, RecordState::Completed);
    assert_eq!(record.outcome, Some(outcome));
    assert_eq!(record.mechanism, Some(Mechanism::Message));
    let kept = record
        .expires_at
        .duration_since(record.completed_at.unwrap())
        .unwrap();
    let ttl = Duration::from_secs(3600);
    assert!(
        kept > ttl - Duration::from_secs(2) && kept <= ttl + Duration::from_secs(1),
        "{kept:?}"
    );
}

/// A transaction that fails after its business write leaves no trace: no record, no coupon;
/// the retry runs the business code once.
pub async fn tx_rollback_leaves_no_trace<S>(store: S, pool: Pool<S::Database>, coupons: String)
where
    S: TxStore + Clone,
    for<'c> &'c mut <S::Database as Database>::Connection: Executor<'c, Database = S::Database>,
    for<'q> <S::Database as Database>::Arguments<'q>: IntoArguments<'q, S::Database>,
    i64: sqlx::Type<S::Database> + for<'r> sqlx::Decode<'r, S::Database>,
    (i64,): for<'r> sqlx::FromRow<'r, <S::Database as Database>::Row>,
{
    let trade_no = format!("T{}", &unique_key().to_hex()[..16]);
    let sql = format!("SELECT COUNT(*) FROM {coupons} WHERE trade_no = '{trade_no}'");
    assert_eq!(
        callback_in_tx(&store, &pool, &coupons, &trade_no, true)
            .await
            .unwrap(),
        Seen::Executed
    );
    let key = Scope::new("pay.callback").storage_key_for(Mechanism::Transaction, &trade_no);
    assert_eq!(store.get(&key).await.unwrap(), None, "no dedup record");
    assert_eq!(count(&pool, &sql).await, 0, "no coupon");

    assert_eq!(
        callback_retrying(&store, &pool, &coupons, &trade_no).await,
        Seen::Executed
    );
    assert_eq!(
        callback_retrying(&store, &pool, &coupons, &trade_no).await,
        Seen::Replayed(Outcome::new(200, "coupon granted"))
    );
    assert_eq!(count(&pool, &sql).await, 1);
    let record = store.get(&key).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Completed);
    assert_eq!(record.namespace, "pay.callback");
}

/// The iron rule as a random walk: transactions over a few trade numbers claim in the
/// transaction, grant a coupon, then commit with the outcome, roll everything back, or commit
/// the coupon with the key released. After each, the coupons and the claims are what a model
/// says: a committed outcome replays (another payload is a mismatch) and its coupon exists
/// once; a rollback leaves neither record nor coupon; a release leaves the coupon and a free
/// key. `WALK_SEED` replays a walk.
pub async fn tx_walk<S>(store: S, pool: Pool<S::Database>, coupons: String)
where
    S: TxStore,
    for<'c> &'c mut <S::Database as Database>::Connection: Executor<'c, Database = S::Database>,
    for<'q> <S::Database as Database>::Arguments<'q>: IntoArguments<'q, S::Database>,
    i64: sqlx::Type<S::Database> + for<'r> sqlx::Decode<'r, S::Database>,
    (i64,): for<'r> sqlx::FromRow<'r, <S::Database as Database>::Row>,
{
    let seed = Walk::seed_from_env("WALK_SEED");
    let mut walk = Walk::new(seed);
    let scope = Scope::new("pay.walk");
    let run = &unique_key().to_hex()[..12];
    let fps = [Fingerprint::of_bytes(b"100"), Fingerprint::of_bytes(b"200")];
    // Per trade number: the committed outcome and its fingerprint, and the coupons granted.
    let mut model: Vec<(Option<(Fingerprint, Outcome)>, i64)> = vec![(None, 0); 3];
    let mut names: Vec<String> = (0..3).map(|k| format!("W{run}-0-{k}")).collect();
    let mut seen: std::collections::BTreeMap<&str, usize> = Default::default();
    for step in 0..150 {
        let k = walk.below(names.len());
        if walk.below(4) == 0 {
            // A committed outcome stays: now and then a new trade number takes this one's place.
            names[k] = format!("W{run}-{step}-{k}");
            model[k] = (None, 0);
        }
        let trade_no = &names[k];
        let fp = fps[walk.below(fps.len())];
        let at = format!("seed {seed}, step {step}, {trade_no}, model {:?}", model[k]);
        let key = IdempotencyKey::parse(trade_no).unwrap();
        let mut tx = pool.begin().await.unwrap();
        let claim = store.claim_in_tx(&mut tx, &scope, &key, &fp).await;
        match (
            &model[k].0,
            claim.unwrap_or_else(|e| panic!("{at}: claim: {e}")),
        ) {
            (None, TxClaim::Execute(lease)) => {
                let grant = format!("INSERT INTO {coupons} (trade_no) VALUES ('{trade_no}')");
                sqlx::query(&grant).execute(&mut *tx).await.unwrap();
                let outcome = Outcome::new(200, format!("coupon at step {step}"));
                match walk.below(3) {
                    0 => {
                        store
                            .complete_in_tx(&mut tx, lease, &outcome)
                            .await
                            .unwrap();
                        tx.commit().await.unwrap();
                        model[k] = (Some((fp, outcome)), model[k].1 + 1);
                        *seen.entry("completed and committed").or_default() += 1;
                    }
                    1 => {
                        store
                            .complete_in_tx(&mut tx, lease, &outcome)
                            .await
                            .unwrap();
                        drop(tx);
                        *seen.entry("rolled back").or_default() += 1;
                    }
                    _ => {
                        store.release_in_tx(&mut tx, lease).await.unwrap();
                        tx.commit().await.unwrap();
                        model[k].1 += 1;
                        *seen.entry("released and committed").or_default() += 1;
                    }
                }
            }
            (Some((held, outcome)), TxClaim::Replay(replayed)) if *held == fp => {
                assert_eq!(&replayed, outcome, "{at}");
                tx.commit().await.unwrap();
                *seen.entry("replayed").or_default() += 1;
            }
            (Some((held, _)), TxClaim::Mismatch) if *held != fp => {
                tx.commit().await.unwrap();
                *seen.entry("mismatch").or_default() += 1;
            }
            (_, claim) => panic!("{at}: the claim answered {claim:?}"),
        }
        let granted = format!("SELECT COUNT(*) FROM {coupons} WHERE trade_no = '{trade_no}'");
        assert_eq!(count(&pool, &granted).await, model[k].1, "{at}: coupons");
        let record = store
            .get(&scope.storage_key_for(Mechanism::Transaction, key.as_str()))
            .await
            .unwrap();
        match (&model[k].0, record) {
            (None, None) => {}
            (Some((fp, outcome)), Some(record)) => {
                assert_eq!(record.state, RecordState::Completed, "{at}");
                assert_eq!(
                    (record.fingerprint, record.outcome.as_ref()),
                    (*fp, Some(outcome)),
                    "{at}"
                );
            }
            (_, record) => panic!("{at}: the record is {record:?}"),
        }
    }
    assert_eq!(
        seen.len(),
        5,
        "seed {seed}: some steps never came: {seen:?}"
    );
}

/// A duplicate that arrives while the owner's transaction is open waits for it, then sees
/// the committed outcome (commit) or takes the key (rollback).
pub async fn tx_waiting_duplicate<S>(store: S, pool: Pool<S::Database>, coupons: String)
where
    S: TxStore + Clone,
    for<'c> &'c mut <S::Database as Database>::Connection: Executor<'c, Database = S::Database>,
    for<'q> <S::Database as Database>::Arguments<'q>: IntoArguments<'q, S::Database>,
    i64: sqlx::Type<S::Database> + for<'r> sqlx::Decode<'r, S::Database>,
    (i64,): for<'r> sqlx::FromRow<'r, <S::Database as Database>::Row>,
{
    for commit in [true, false] {
        let trade_no = format!("T{}", &unique_key().to_hex()[..16]);
        let scope = Scope::new("pay.callback");
        let key = IdempotencyKey::parse(&trade_no).unwrap();
        let fingerprint = Fingerprint::of_bytes(trade_no.as_bytes());
        let mut owner = pool.begin().await.unwrap();
        let TxClaim::Execute(lease) = store
            .claim_in_tx(&mut owner, &scope, &key, &fingerprint)
            .await
            .unwrap()
        else {
            panic!("the first transaction owns the key");
        };
        let duplicate = {
            let (store, pool, coupons, trade_no) = (
                store.clone(),
                pool.clone(),
                coupons.clone(),
                trade_no.clone(),
            );
            tokio::spawn(async move { callback_retrying(&store, &pool, &coupons, &trade_no).await })
        };
        // The duplicate is blocked on the owner's uncommitted row while the owner works.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !duplicate.is_finished(),
            "the duplicate waits for the owner"
        );
        let grant = format!("INSERT INTO {coupons} (trade_no) VALUES ('{trade_no}')");
        sqlx::query(&grant).execute(&mut *owner).await.unwrap();
        store
            .complete_in_tx(&mut owner, lease, &Outcome::new(200, "coupon granted"))
            .await
            .unwrap();
        if commit {
            owner.commit().await.unwrap();
        } else {
            owner.rollback().await.unwrap();
        }
        let seen = duplicate.await.unwrap();
        let sql = format!("SELECT COUNT(*) FROM {coupons} WHERE trade_no = '{trade_no}'");
        if commit {
            assert_eq!(seen, Seen::Replayed(Outcome::new(200, "coupon granted")));
        } else {
            assert_eq!(
                seen,
                Seen::Executed,
                "after a rollback the duplicate executes"
            );
        }
        assert_eq!(count(&pool, &sql).await, 1);
    }
}

/// A transactional claim respects a live lease taken outside a transaction (by the engine),
/// and a mismatched payload.
pub async fn tx_sees_engine_claims<S>(store: S, pool: Pool<S::Database>)
where
    S: TxStore + Clone,
    for<'c> &'c mut <S::Database as Database>::Connection: Executor<'c, Database = S::Database>,
    for<'q> <S::Database as Database>::Arguments<'q>: IntoArguments<'q, S::Database>,
{
    let scope = Scope::new("pay.callback");
    let key = IdempotencyKey::parse(&format!("K{}", &unique_key().to_hex()[..16])).unwrap();
    // A committed claim of another owner (taken outside any transaction) on the key.
    let storage_key = scope.storage_key_for(Mechanism::Transaction, key.as_str());
    let fp = Fingerprint::of_bytes(b"a");
    let claim = store
        .claim(ClaimRequest {
            key: &storage_key,
            namespace: scope.namespace(),
            fingerprint: &fp,
            lease: Duration::from_secs(30),
            claim_id: idempotency_core::ClaimId::random(),
            mechanism: None,
            key_derivation: None,
        })
        .await
        .unwrap();
    assert!(matches!(claim, Claim::Acquired(_)));
    let mut tx = pool.begin().await.unwrap();
    assert!(matches!(
        store.claim_in_tx(&mut tx, &scope, &key, &fp).await.unwrap(),
        TxClaim::InFlight { .. }
    ));
    assert!(matches!(
        store
            .claim_in_tx(&mut tx, &scope, &key, &Fingerprint::of_bytes(b"b"))
            .await
            .unwrap(),
        TxClaim::Mismatch
    ));
    tx.rollback().await.unwrap();
}
