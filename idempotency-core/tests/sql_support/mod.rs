//! Scenarios shared by the SQL store tests: transactional dedup and state machines, written
//! once over any sqlx database, run against the real servers by `sql_postgres.rs`,
//! `sql_mysql.rs` and `sql_sqlite.rs`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    unreachable_pub,
    dead_code
)]

pub mod operations;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use idempotency_core::function::sql::TransitionExecutor;
use idempotency_core::sql::{
    ListFilter, SCHEMA_TABLE, SCHEMA_VERSION, Transition, TransitionOutcome, TxClaim, TxStore,
};
use idempotency_core::testing::{Walk, concurrently, unique_key};
use idempotency_core::{
    Claim, ClaimRequest, Fingerprint, IdempotencyKey, Mechanism, Outcome, RecordState, Scope,
    Store, StoreError,
};
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
            let mut tables = sql_support::operations::$scenario(store.clone(), pool.clone()).await;
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

/// Which release a node of the fleet runs, for [`tx_upgrade`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Node {
    /// 0.1: transactions keyed as requests.
    V0_1,
    /// 0.2 with `with_previous_keys(true)`: the key of 0.1 (key derivation 1) first, then its
    /// own.
    Bridged,
    /// 0.2 with the setting off: its own key only.
    V0_2,
}

/// One coupon callback in a transaction, claimed as `node` claims it; a transient abort is
/// retried whole.
async fn callback_as<S>(node: Node, stores: &(S, S), coupons: &str, trade_no: &str) -> Seen
where
    S: TxStore,
    for<'c> &'c mut <S::Database as Database>::Connection: Executor<'c, Database = S::Database>,
    for<'q> <S::Database as Database>::Arguments<'q>: IntoArguments<'q, S::Database>,
{
    let (plain, bridged) = stores;
    let scope = Scope::new("pay.callback");
    let key = IdempotencyKey::parse(trade_no).unwrap();
    let fingerprint = Fingerprint::of_bytes(trade_no.as_bytes());
    for _ in 0..20 {
        let mut tx = plain.begin().await.unwrap();
        let claim = match node {
            Node::V0_1 => {
                let key_of_0_1 = scope.storage_key(&key);
                let request = plain.tx_request(scope.namespace(), &key_of_0_1, &fingerprint);
                plain.claim_storage_key_in_tx(&mut tx, request).await
            }
            Node::Bridged => {
                bridged
                    .claim_in_tx(&mut tx, &scope, &key, &fingerprint)
                    .await
            }
            Node::V0_2 => plain.claim_in_tx(&mut tx, &scope, &key, &fingerprint).await,
        };
        let seen = match claim {
            Ok(TxClaim::Execute(lease)) => {
                let grant = format!("INSERT INTO {coupons} (trade_no) VALUES ('{trade_no}')");
                sqlx::query(&grant).execute(&mut *tx).await.unwrap();
                let outcome = Outcome::new(200, "coupon granted");
                // The lease says which keys it holds; completing is the same on every node.
                plain
                    .complete_in_tx(&mut tx, lease, &outcome)
                    .await
                    .unwrap();
                Seen::Executed
            }
            Ok(TxClaim::Replay(outcome)) => Seen::Replayed(outcome),
            Ok(TxClaim::InFlight { .. }) => Seen::InFlight,
            Ok(TxClaim::Mismatch) => Seen::Mismatch,
            Err(error) if error.is_transient() => {
                eprintln!("retrying an aborted transaction: {error}");
                continue;
            }
            Err(error) => panic!("{node:?}: claim failed: {error}"),
        };
        if seen == Seen::Executed {
            tx.commit().await.unwrap();
        } else {
            tx.rollback().await.unwrap();
        }
        return seen;
    }
    panic!("20 aborted transactions in a row");
}

/// The upgrade from 0.1, key derivation 1 to 2 (`with_previous_keys`): a record 0.1 committed is replayed by bridged
/// nodes; a fleet of 0.1 and bridged nodes runs a storm of one callback once; a record bridged
/// nodes wrote is replayed by 0.1 and by 0.2 nodes with the setting off. Without the setting,
/// a 0.2 node does not see 0.1's record (why the setting exists).
pub async fn tx_upgrade<S>(plain: S, bridged: S, pool: Pool<S::Database>, coupons: String)
where
    S: TxStore + Clone,
    for<'c> &'c mut <S::Database as Database>::Connection: Executor<'c, Database = S::Database>,
    for<'q> <S::Database as Database>::Arguments<'q>: IntoArguments<'q, S::Database>,
    i64: sqlx::Type<S::Database> + for<'r> sqlx::Decode<'r, S::Database>,
    (i64,): for<'r> sqlx::FromRow<'r, <S::Database as Database>::Row>,
{
    assert!(bridged.reads_previous_keys() && !plain.reads_previous_keys());
    let stores = Arc::new((plain, bridged));
    let granted = Seen::Replayed(Outcome::new(200, "coupon granted"));
    let trade = || format!("T{}", &unique_key().to_hex()[..16]);
    let coupons_of =
        |trade_no: &str| format!("SELECT COUNT(*) FROM {coupons} WHERE trade_no = '{trade_no}'");

    let paid_under_0_1 = trade();
    assert_eq!(
        callback_as(Node::V0_1, &stores, &coupons, &paid_under_0_1).await,
        Seen::Executed
    );
    assert_eq!(
        callback_as(Node::Bridged, &stores, &coupons, &paid_under_0_1).await,
        granted,
        "0.1's record is replayed"
    );
    assert_eq!(
        callback_as(Node::V0_2, &stores, &coupons, &paid_under_0_1).await,
        Seen::Executed,
        "without the setting, 0.1's record is not seen"
    );

    let paid_bridged = trade();
    assert_eq!(
        callback_as(Node::Bridged, &stores, &coupons, &paid_bridged).await,
        Seen::Executed
    );
    assert_eq!(
        callback_as(Node::V0_1, &stores, &coupons, &paid_bridged).await,
        granted,
        "0.1 nodes see it"
    );
    assert_eq!(
        callback_as(Node::V0_2, &stores, &coupons, &paid_bridged).await,
        granted,
        "so do nodes past the upgrade"
    );
    assert_eq!(count(&pool, &coupons_of(&paid_bridged)).await, 1);

    // A rolling deploy: 0.1 and bridged nodes side by side, every callback at once.
    let storm = trade();
    let seen = concurrently(40, |caller| {
        let node = if caller % 2 == 0 {
            Node::V0_1
        } else {
            Node::Bridged
        };
        let (stores, coupons, storm) = (Arc::clone(&stores), coupons.clone(), storm.clone());
        async move {
            loop {
                match callback_as(node, &stores, &coupons, &storm).await {
                    Seen::InFlight => tokio::time::sleep(Duration::from_millis(20)).await,
                    seen => return seen,
                }
            }
        }
    })
    .await;
    let executed = seen.iter().filter(|s| **s == Seen::Executed).count();
    assert_eq!(
        executed, 1,
        "one run across 0.1 and bridged nodes: {seen:?}"
    );
    assert!(
        seen.iter().all(|s| *s == Seen::Executed || *s == granted),
        "{seen:?}"
    );
    assert_eq!(count(&pool, &coupons_of(&storm)).await, 1, "one coupon");
}

/// Purge in bounded batches, and reconciliation listing by namespace, state and time.
pub async fn purge_batches_and_list<S: Store>(
    store: S,
    list: impl AsyncFn(&S, ListFilter) -> Vec<idempotency_core::Record>,
) {
    let namespace = format!("ns{}", &unique_key().to_hex()[..10]);
    let fp = Fingerprint::of_bytes(b"x");
    let started = std::time::SystemTime::now() - Duration::from_secs(1);
    let mut keys = Vec::new();
    for index in 0..7 {
        let key = unique_key();
        let Claim::Acquired(lease) = store
            .claim(ClaimRequest {
                key: &key,
                namespace: &namespace,
                fingerprint: &fp,
                lease: Duration::from_secs(30),
                claim_id: idempotency_core::ClaimId::random(),
                mechanism: None,
                key_derivation: None,
            })
            .await
            .unwrap()
        else {
            panic!("fresh key");
        };
        if index < 5 {
            store
                .complete(
                    &key,
                    lease.token,
                    &Outcome::new(200, "ok"),
                    Duration::from_millis(200),
                )
                .await
                .unwrap();
        }
        keys.push(key);
    }
    let all = list(&store, ListFilter::new(100).namespace(namespace.clone())).await;
    assert_eq!(all.len(), 7);
    assert!(all.windows(2).all(|w| w[0].updated_at <= w[1].updated_at));
    let running = list(
        &store,
        ListFilter::new(100)
            .namespace(namespace.clone())
            .state(RecordState::InProgress),
    )
    .await;
    assert_eq!(running.len(), 2);
    assert!(
        running
            .iter()
            .all(|r| r.state == RecordState::InProgress && r.outcome.is_none())
    );
    let limited = list(&store, ListFilter::new(3).namespace(namespace.clone())).await;
    assert_eq!(limited.len(), 3);
    let later = list(
        &store,
        ListFilter::new(100)
            .namespace(namespace.clone())
            .updated_from(std::time::SystemTime::now() + Duration::from_secs(60)),
    )
    .await;
    assert!(later.is_empty());
    let window = list(
        &store,
        ListFilter::new(100)
            .namespace(namespace.clone())
            .updated_from(started)
            .updated_before(std::time::SystemTime::now() + Duration::from_secs(5)),
    )
    .await;
    assert_eq!(window.len(), 7);

    tokio::time::sleep(Duration::from_millis(500)).await;
    // Other tests share the table: purge until our five completed records are gone, in
    // batches of at most 2.
    let mut rounds = 0;
    loop {
        let mut left = 0;
        for key in &keys[..5] {
            left += usize::from(store.get(key).await.unwrap().is_some());
        }
        if left == 0 {
            break;
        }
        let purged = store.purge_expired(2).await.unwrap();
        assert!(purged <= 2, "a batch never exceeds its limit");
        rounds += 1;
        assert!(rounds < 10_000, "purge makes progress");
    }
    for key in &keys[5..] {
        assert!(store.get(key).await.unwrap().is_some(), "live leases stay");
    }
}

/// The generic background sweeper (`spawn_sweeper`) purges an SQL store's expired records and,
/// once the store's abandoned grace has passed (give it a short one), abandoned leases.
pub async fn sweeper_purges<S: Store>(store: S) {
    let store = Arc::new(store);
    let key = unique_key();
    let fp = Fingerprint::of_bytes(b"x");
    let Claim::Acquired(lease) = store
        .claim(ClaimRequest {
            key: &key,
            namespace: "sweeper",
            fingerprint: &fp,
            lease: Duration::from_secs(30),
            claim_id: idempotency_core::ClaimId::random(),
            mechanism: None,
            key_derivation: None,
        })
        .await
        .unwrap()
    else {
        panic!("fresh key");
    };
    store
        .complete(
            &key,
            lease.token,
            &Outcome::new(200, "ok"),
            Duration::from_millis(100),
        )
        .await
        .unwrap();
    // An owner that crashed: its lease ends, and the store's (short) abandoned grace after it.
    let abandoned = unique_key();
    let claim = store
        .claim(ClaimRequest {
            key: &abandoned,
            namespace: "sweeper",
            fingerprint: &fp,
            lease: Duration::from_millis(100),
            claim_id: idempotency_core::ClaimId::random(),
            mechanism: None,
            key_derivation: None,
        })
        .await
        .unwrap();
    assert!(matches!(claim, Claim::Acquired(_)));
    let _sweeper =
        idempotency_core::spawn_sweeper(Arc::clone(&store), Duration::from_millis(50), 100);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    for key in [&key, &abandoned] {
        while store.get(key).await.unwrap().is_some() {
            assert!(
                std::time::Instant::now() < deadline,
                "the sweeper purges expired records and abandoned leases past their grace"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The owner fails (rolls back) while 50 duplicates wait on its row: exactly one of them takes
/// the key and grants, all the others replay that one's outcome. One coupon.
pub async fn tx_owner_rollback_under_storm<S>(store: S, pool: Pool<S::Database>, coupons: String)
where
    S: TxStore + Clone,
    for<'c> &'c mut <S::Database as Database>::Connection: Executor<'c, Database = S::Database>,
    for<'q> <S::Database as Database>::Arguments<'q>: IntoArguments<'q, S::Database>,
    i64: sqlx::Type<S::Database> + for<'r> sqlx::Decode<'r, S::Database>,
    (i64,): for<'r> sqlx::FromRow<'r, <S::Database as Database>::Row>,
{
    const WAITERS: usize = 50;
    let trade_no = format!("T{}", &unique_key().to_hex()[..16]);
    let scope = Scope::new("pay.callback");
    let key = IdempotencyKey::parse(&trade_no).unwrap();
    let fingerprint = Fingerprint::of_bytes(trade_no.as_bytes());
    let mut owner = pool.begin().await.unwrap();
    let TxClaim::Execute(_lease) = store
        .claim_in_tx(&mut owner, &scope, &key, &fingerprint)
        .await
        .unwrap()
    else {
        panic!("the first transaction owns the key");
    };
    let waiters: Vec<_> = (0..WAITERS)
        .map(|_| {
            let (store, pool, coupons, trade_no) = (
                store.clone(),
                pool.clone(),
                coupons.clone(),
                trade_no.clone(),
            );
            tokio::spawn(async move { callback_retrying(&store, &pool, &coupons, &trade_no).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    owner.rollback().await.unwrap();
    let mut seen = Vec::new();
    for waiter in waiters {
        seen.push(waiter.await.unwrap());
    }
    let executed = seen.iter().filter(|s| **s == Seen::Executed).count();
    assert_eq!(
        executed, 1,
        "one waiter takes the key after the rollback: {seen:?}"
    );
    let granted = Outcome::new(200, "coupon granted");
    assert!(
        seen.iter()
            .all(|s| *s == Seen::Executed || *s == Seen::Replayed(granted.clone())),
        "{seen:?}"
    );
    let sql = format!("SELECT COUNT(*) FROM {coupons} WHERE trade_no = '{trade_no}'");
    assert_eq!(count(&pool, &sql).await, 1);
}

/// The sqlx operations the state-machine scenarios need, on any database that runs
/// transitions: their bounds are written once, in the blanket impl.
pub trait TransitionDb: Database {
    /// Runs a statement on the pool.
    fn run<'a>(pool: &'a Pool<Self>, sql: &'a str) -> impl Future<Output = ()> + Send + 'a;

    /// The one `BIGINT` a query returns.
    fn scalar<'a>(pool: &'a Pool<Self>, sql: &'a str) -> impl Future<Output = i64> + Send + 'a;

    /// The one nullable text a query returns.
    fn text<'a>(
        pool: &'a Pool<Self>,
        sql: &'a str,
    ) -> impl Future<Output = Option<String>> + Send + 'a;

    /// Applies `transition` to the row `id` in a transaction and, only when it applied, runs
    /// `grant` (with `id` bound) in the same transaction.
    fn apply_in_tx<'a>(
        pool: &'a Pool<Self>,
        transition: &'a Transition,
        id: i64,
        grant: Option<&'a str>,
    ) -> impl Future<Output = TransitionOutcome> + Send + 'a;

    /// Applies `transition` outside a transaction, on a connection of the pool.
    fn apply_on_connection<'a>(
        pool: &'a Pool<Self>,
        transition: &'a Transition,
        id: i64,
    ) -> impl Future<Output = Result<TransitionOutcome, StoreError>> + Send + 'a;
}

impl<DB> TransitionDb for DB
where
    DB: Database,
    DB::Connection: TransitionExecutor<Database = DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB> + for<'r> sqlx::Decode<'r, DB>,
    (i64,): for<'r> sqlx::FromRow<'r, DB::Row>,
    (Option<String>,): for<'r> sqlx::FromRow<'r, DB::Row>,
{
    async fn run(pool: &Pool<Self>, sql: &str) {
        sqlx::query(sql).execute(pool).await.unwrap();
    }

    async fn scalar(pool: &Pool<Self>, sql: &str) -> i64 {
        count(pool, sql).await
    }

    async fn text(pool: &Pool<Self>, sql: &str) -> Option<String> {
        let (text,): (Option<String>,) = sqlx::query_as(sql).fetch_one(pool).await.unwrap();
        text
    }

    async fn apply_in_tx(
        pool: &Pool<Self>,
        transition: &Transition,
        id: i64,
        grant: Option<&str>,
    ) -> TransitionOutcome {
        let mut tx = pool.begin().await.unwrap();
        let outcome = tx.apply_transition(transition, id).await.unwrap();
        if let (true, Some(grant)) = (outcome.is_applied(), grant) {
            sqlx::query(grant).bind(id).execute(&mut *tx).await.unwrap();
        }
        tx.commit().await.unwrap();
        outcome
    }

    async fn apply_on_connection(
        pool: &Pool<Self>,
        transition: &Transition,
        id: i64,
    ) -> Result<TransitionOutcome, StoreError> {
        let mut conn = pool.acquire().await.unwrap();
        (*conn).apply_transition(transition, id).await
    }
}

/// What the state-machine scenarios write differently on each database (implemented by each
/// test file for its own).
pub trait Dialect: TransitionDb {
    /// An auto-numbered key column: `BIGSERIAL PRIMARY KEY`, `BIGINT AUTO_INCREMENT PRIMARY
    /// KEY` or `INTEGER PRIMARY KEY`.
    const SERIAL_KEY: &'static str;
    /// The first bind placeholder: `$1` or `?`.
    const PLACEHOLDER: &'static str;
    /// A small integer column for state codes: `SMALLINT`, `TINYINT`, `INTEGER`.
    const CODE_COLUMN: &'static str;

    /// Applies `transition` outside a transaction: on a connection of the pool, unless the
    /// database takes the pool itself as the executor.
    fn apply_outside_tx<'a>(
        pool: &'a Pool<Self>,
        transition: &'a Transition,
        id: i64,
    ) -> impl Future<Output = Result<TransitionOutcome, StoreError>> + Send + 'a {
        Self::apply_on_connection(pool, transition, id)
    }
}

/// Orders table with one order in WAIT_PAY (42) and one CLOSED (43), plus a coupons table.
pub async fn orders<DB: Dialect>(pool: &Pool<DB>) -> (String, String) {
    let (orders, coupons) = (unique_table("orders"), unique_table("coupons"));
    for ddl in [
        format!(
            "CREATE TABLE {orders} (id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL, \
             trade_no VARCHAR(64))"
        ),
        format!(
            "CREATE TABLE {coupons} (id {}, order_id BIGINT NOT NULL)",
            DB::SERIAL_KEY
        ),
        format!("INSERT INTO {orders} (id, status) VALUES (42, 'WAIT_PAY'), (43, 'CLOSED')"),
    ] {
        DB::run(pool, &ddl).await;
    }
    (orders, coupons)
}

/// The post-mortem's fix: the callback moves the order WAIT_PAY → PAID and grants the coupon only
/// when the transition applied, in the same transaction.
pub async fn paid_callback<DB: Dialect>(
    pool: &Pool<DB>,
    orders: &str,
    coupons: &str,
    id: i64,
) -> TransitionOutcome {
    let mark_paid = Transition::new(orders, "id", "status")
        .unwrap()
        .from("WAIT_PAY")
        .to("PAID")
        .also_set("trade_no", format!("T{id}"));
    let grant = format!(
        "INSERT INTO {coupons} (order_id) VALUES ({})",
        DB::PLACEHOLDER
    );
    DB::apply_in_tx(pool, &mark_paid, id, Some(&grant)).await
}

/// Order 42 moves to the target once, then is already in it `repeats` times; order 43 is in
/// `illegal` (an illegal source, reported); order 44 does not exist.
async fn walk_outcomes(pay: impl AsyncFn(i64) -> TransitionOutcome, repeats: usize, illegal: &str) {
    assert_eq!(pay(42).await, TransitionOutcome::Applied);
    for _ in 0..repeats {
        assert_eq!(pay(42).await, TransitionOutcome::AlreadyInTarget);
    }
    assert_eq!(
        pay(43).await,
        TransitionOutcome::Illegal {
            current: illegal.to_owned()
        }
    );
    assert_eq!(pay(44).await, TransitionOutcome::NotFound);
}

/// Drops a scenario's tables once it passed.
pub async fn drop_tables<DB: TransitionDb>(pool: &Pool<DB>, tables: &[String]) {
    for table in tables {
        DB::run(pool, &format!("DROP TABLE IF EXISTS {table}")).await;
    }
}

/// Deletes a dropped store table's schema version.
pub async fn forget_version<DB: TransitionDb>(pool: &Pool<DB>, table: &str) {
    DB::run(
        pool,
        &format!("DELETE FROM {SCHEMA_TABLE} WHERE table_name = '{table}'"),
    )
    .await;
}

/// Applied once, then already in the target five times, an illegal source and a missing row:
/// one coupon, `trade_no` set with the transition, and a transition outside a transaction.
pub async fn transition_applied_once<DB: Dialect>(pool: Pool<DB>) {
    let (orders, coupons) = orders(&pool).await;
    let pay = async |id: i64| paid_callback(&pool, &orders, &coupons, id).await;
    walk_outcomes(pay, 5, "CLOSED").await;
    let granted = DB::scalar(&pool, &format!("SELECT COUNT(*) FROM {coupons}")).await;
    assert_eq!(granted, 1, "six callbacks, one coupon");
    let trade_no = DB::text(
        &pool,
        &format!("SELECT trade_no FROM {orders} WHERE id = 42"),
    )
    .await;
    assert_eq!(trade_no.as_deref(), Some("T42"), "set with the transition");
    // Usable outside a transaction too.
    let reopen = Transition::new(&orders, "id", "status")
        .unwrap()
        .from("PAID")
        .from("CLOSED")
        .to("REFUNDED");
    assert_eq!(
        DB::apply_outside_tx(&pool, &reopen, 43).await.unwrap(),
        TransitionOutcome::Applied
    );
    drop_tables(&pool, &[orders, coupons]).await;
}

/// 200 concurrent callbacks for one order: one applies, the others find it already in the
/// target; one coupon.
pub async fn transition_storm<DB: Dialect>(pool: Pool<DB>) {
    let (orders, coupons) = orders(&pool).await;
    let outcomes = concurrently(200, |_| {
        let (pool, orders, coupons) = (pool.clone(), orders.clone(), coupons.clone());
        async move { paid_callback(&pool, &orders, &coupons, 42).await }
    })
    .await;
    let applied = outcomes.iter().filter(|o| o.is_applied()).count();
    assert_eq!(applied, 1);
    assert!(
        outcomes.iter().all(|o| matches!(
            o,
            TransitionOutcome::Applied | TransitionOutcome::AlreadyInTarget
        )),
        "{outcomes:?}"
    );
    let granted = DB::scalar(&pool, &format!("SELECT COUNT(*) FROM {coupons}")).await;
    assert_eq!(granted, 1, "200 concurrent callbacks, one coupon");
    drop_tables(&pool, &[orders, coupons]).await;
}

/// Integer state codes (10 = WAIT_PAY, 20 = PAID, 90 = CLOSED), as many order tables keep
/// them: applied once, then already in the target, an illegal source reported with its code;
/// text and code states mixed are refused.
pub async fn transition_with_codes<DB: Dialect>(pool: Pool<DB>) {
    let orders = unique_table("coded_orders");
    for ddl in [
        format!(
            "CREATE TABLE {orders} (id BIGINT PRIMARY KEY, status {} NOT NULL)",
            DB::CODE_COLUMN
        ),
        format!("INSERT INTO {orders} (id, status) VALUES (42, 10), (43, 90)"),
    ] {
        DB::run(&pool, &ddl).await;
    }
    let mark_paid = Transition::new(&orders, "id", "status")
        .unwrap()
        .from(10)
        .to(20);
    let pay = async |id: i64| DB::apply_in_tx(&pool, &mark_paid, id, None).await;
    walk_outcomes(pay, 1, "90").await;
    let paid = format!("SELECT COUNT(*) FROM {orders} WHERE id = 42 AND status = 20");
    assert_eq!(DB::scalar(&pool, &paid).await, 1, "order 42 holds code 20");
    let mixed = Transition::new(&orders, "id", "status")
        .unwrap()
        .from("WAIT_PAY")
        .to(20);
    assert!(matches!(
        DB::apply_outside_tx(&pool, &mixed, 43).await,
        Err(StoreError::Config(_))
    ));
    drop_tables(&pool, &[orders]).await;
}

/// The state-machine tests, one `#[tokio::test]` a scenario, for the test file's database:
/// `$pool` is its `pool(max)`, `None` (the test skips) when the server is unreachable outside CI.
macro_rules! transition_tests {
    ($pool:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn transition_applied_once_then_already_in_target() {
            if let Some(pool) = $pool(4).await {
                $crate::sql_support::transition_applied_once(pool).await;
            }
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn transition_200_concurrent_callbacks_one_coupon() {
            if let Some(pool) = $pool(20).await {
                $crate::sql_support::transition_storm(pool).await;
            }
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn transition_with_integer_state_codes() {
            if let Some(pool) = $pool(2).await {
                $crate::sql_support::transition_with_codes(pool).await;
            }
        }
    };
}
pub(crate) use transition_tests;

/// The transactional, purge and sweeper scenarios above as `#[tokio::test]`s, for a test file
/// with `fresh(max_connections) -> Option<(store, pool, coupons table)>` and
/// `drop_tables(&pool, &[table])`, which runs once a scenario passed. `$store` is the store type.
/// Versioned migrations: a table is at the latest schema version once migrated, and a table
/// created by 0.1 (the same schema, no version row) is upgraded in place, its records kept;
/// migrating an up-to-date table changes nothing (no DDL, the version row untouched); a table
/// newer than this release is refused.
/// The schema version this release writes.
const LATEST_VERSION: i64 = SCHEMA_VERSION as i64;

pub async fn migrations_are_versioned<S, M>(
    store: S,
    pool: Pool<S::Database>,
    table: String,
    migrate: M,
) where
    S: TxStore,
    S::Database: Dialect,
    M: AsyncFn(&S) -> Result<(), StoreError>,
{
    let version = format!("SELECT version FROM {SCHEMA_TABLE} WHERE table_name = '{table}'");
    assert_eq!(S::Database::scalar(&pool, &version).await, LATEST_VERSION);

    // A record written before the upgrade.
    let key = unique_key();
    let fp = Fingerprint::of_bytes(b"kept");
    let Claim::Acquired(lease) = store
        .claim(ClaimRequest {
            key: &key,
            namespace: "migrations",
            fingerprint: &fp,
            lease: Duration::from_secs(30),
            claim_id: idempotency_core::ClaimId::random(),
            mechanism: None,
            key_derivation: None,
        })
        .await
        .unwrap()
    else {
        panic!("a fresh key is claimed");
    };
    let outcome = Outcome::new(200, "before the upgrade");
    store
        .complete(&key, lease.token, &outcome, Duration::from_secs(3600))
        .await
        .unwrap();

    // As 0.1 left it: the table without the claim id, the conflict mark nor what wrote each
    // record, no version row.
    let forget_version = format!("DELETE FROM {SCHEMA_TABLE} WHERE table_name = '{table}'");
    for column in [
        "claim_id",
        "conflicts",
        "last_conflict_at",
        "mechanism",
        "key_derivation",
    ] {
        S::Database::run(&pool, &format!("ALTER TABLE {table} DROP COLUMN {column}")).await;
    }
    S::Database::run(&pool, &forget_version).await;
    migrate(&store).await.unwrap();
    assert_eq!(S::Database::scalar(&pool, &version).await, LATEST_VERSION);
    // A migration that stopped after its DDL (MySQL commits each at once), before it recorded
    // the version: run again, it completes.
    S::Database::run(&pool, &forget_version).await;
    migrate(&store).await.unwrap();
    assert_eq!(S::Database::scalar(&pool, &version).await, LATEST_VERSION);
    let record = store.get(&key).await.unwrap().expect("the record survives");
    assert_eq!(record.outcome, Some(outcome));
    assert_eq!((record.conflicts, record.last_conflict_at), (0, None));
    assert!(
        store.mark_conflict(&key).await.unwrap(),
        "the upgraded table keeps marks"
    );
    assert_eq!(store.get(&key).await.unwrap().map(|r| r.conflicts), Some(1));
    // Rows written before records said what wrote them read as unknown.
    assert_eq!((record.mechanism, record.key_derivation), (None, None));
    // Rows written after it say so.
    let said = unique_key();
    store
        .claim(ClaimRequest {
            key: &said,
            namespace: "migrations",
            fingerprint: &fp,
            lease: Duration::from_secs(30),
            claim_id: idempotency_core::ClaimId::random(),
            mechanism: Some(idempotency_core::Mechanism::Message),
            key_derivation: Some(2),
        })
        .await
        .unwrap();
    let record = store.get(&said).await.unwrap().expect("claimed");
    assert_eq!(
        (record.mechanism, record.key_derivation),
        (Some(idempotency_core::Mechanism::Message), Some(2))
    );

    // Up to date: the version row is not written again (its stamp stays as set here).
    let marked = "migrated_at = '2001-01-01 00:00:00'";
    S::Database::run(
        &pool,
        &format!("UPDATE {SCHEMA_TABLE} SET {marked} WHERE table_name = '{table}'"),
    )
    .await;
    migrate(&store).await.unwrap();
    let untouched =
        format!("SELECT COUNT(*) FROM {SCHEMA_TABLE} WHERE table_name = '{table}' AND {marked}");
    assert_eq!(
        S::Database::scalar(&pool, &untouched).await,
        1,
        "an up-to-date table is left as it is"
    );

    // A table from a newer release is refused, not downgraded.
    S::Database::run(
        &pool,
        &format!("UPDATE {SCHEMA_TABLE} SET version = 99 WHERE table_name = '{table}'"),
    )
    .await;
    assert!(matches!(migrate(&store).await, Err(StoreError::Config(_))));
    S::Database::run(
        &pool,
        &format!("DELETE FROM {SCHEMA_TABLE} WHERE table_name = '{table}'"),
    )
    .await;
}

macro_rules! store_scenario_tests {
    ($store:ty) => {
        $crate::sql_support::store_scenario_tests!(@test tx_storm_200_duplicates_one_coupon, 20,
            |store, pool, coupons| $crate::sql_support::tx_storm(store, pool, coupons));
        $crate::sql_support::store_scenario_tests!(@test tx_rollback_leaves_no_trace, 4,
            |store, pool, coupons| $crate::sql_support::tx_rollback_leaves_no_trace(store, pool, coupons));
        $crate::sql_support::store_scenario_tests!(@test tx_waiting_duplicate_replays_or_executes, 4,
            |store, pool, coupons| $crate::sql_support::tx_waiting_duplicate(store, pool, coupons));
        $crate::sql_support::store_scenario_tests!(@test tx_owner_rollback_under_storm, 20,
            |store, pool, coupons| $crate::sql_support::tx_owner_rollback_under_storm(store, pool, coupons));
        $crate::sql_support::store_scenario_tests!(@test tx_walk_follows_the_iron_rule, 2,
            |store, pool, coupons| $crate::sql_support::tx_walk(store, pool, coupons));
        $crate::sql_support::store_scenario_tests!(@test tx_sees_engine_claims, 4,
            |store, pool, _coupons| $crate::sql_support::tx_sees_engine_claims(store, pool));
        $crate::sql_support::store_scenario_tests!(@test tx_upgrade, 20,
            |store, pool, coupons| $crate::sql_support::tx_upgrade(
                store.clone(),
                store.with_previous_keys(true),
                pool,
                coupons,
            ));
        $crate::sql_support::store_scenario_tests!(@test purge_batches_and_list, 4,
            |store, _pool, _coupons| $crate::sql_support::purge_batches_and_list(
                store,
                async |s: &$store, filter| s.list(&filter).await.unwrap(),
            ));
        $crate::sql_support::store_scenario_tests!(@test migrations_are_versioned, 2,
            |store, pool, _coupons| $crate::sql_support::migrations_are_versioned(
                store.clone(),
                pool,
                store.table_name().to_owned(),
                async |s: &$store| s.migrate().await,
            ));
        $crate::sql_support::store_scenario_tests!(@test sweeper_purges_expired_records, 2,
            |store, _pool, _coupons| $crate::sql_support::sweeper_purges(
                store.with_abandoned_grace(std::time::Duration::from_millis(200)),
            ));
    };
    (@test $name:ident, $connections:expr, |$store:ident, $pool:ident, $coupons:ident| $scenario:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $name() {
            if let Some(($store, $pool, $coupons)) = fresh($connections).await {
                let tables = [$store.table_name().to_owned(), $coupons.clone()];
                let cleanup = $pool.clone();
                $scenario.await;
                drop_tables(&cleanup, &tables).await;
                $crate::sql_support::forget_version(&cleanup, &tables[0]).await;
            }
        }
    };
}
pub(crate) use store_scenario_tests;
