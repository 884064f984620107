//! `Tx::after_commit` of the SQL truth against real PostgreSQL: a hook runs once the business
//! writes and their record committed, before the delivery is answered; never after a rollback,
//! never for a replay.
#![cfg(feature = "sql")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
#[allow(dead_code)] // The child-process helpers serve the broker tests.
mod tiers;

use std::sync::{Arc, Mutex};

use idempotency_core::Scope;
use idempotency_queue::two_tier::{Json, SqlTruth, TwoTier, Tx};
use idempotency_queue::{JsonField, Message, Verdict};
use sqlx::{PgPool, Postgres};
use tiers::Tiers;

#[derive(serde::Deserialize)]
struct Paid {
    trade_no: String,
    /// The business code fails after its write and its hook: the transaction rolls back.
    #[serde(default)]
    fail: bool,
}

/// What the hooks saw, in the order they ran: `(hook, trade, its rows seen from another
/// connection)`.
type Seen = Arc<Mutex<Vec<(&'static str, String, i64)>>>;

async fn rows_elsewhere(pool: &PgPool, table: &str, trade: &str) -> i64 {
    sqlx::query_scalar(&format!(
        "SELECT COUNT(*) FROM {table} WHERE business_key = $1"
    ))
    .bind(trade)
    .fetch_one(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn an_after_commit_hook_runs_once_after_the_commit_never_after_a_rollback_or_a_replay() {
    let Some(tiers) = Tiers::new(0, "idem-after-commit").await else {
        return;
    };
    let seen = Seen::default();
    let (pool, table) = (tiers.pool().clone(), tiers.coupons_table().to_owned());
    let hooks = Arc::clone(&seen);
    let grant = move |tx: Tx<Postgres>, Json(paid): Json<Paid>| {
        let (pool, table, seen) = (pool.clone(), table.clone(), Arc::clone(&hooks));
        async move {
            sqlx::query(&format!("INSERT INTO {table} (business_key) VALUES ($1)"))
                .bind(&paid.trade_no)
                .execute(&mut *tx.conn().await)
                .await?;
            for hook in ["first", "second"] {
                let (pool, table, seen) = (pool.clone(), table.clone(), Arc::clone(&seen));
                let trade = paid.trade_no.clone();
                tx.after_commit(async move {
                    let rows = rows_elsewhere(&pool, &table, &trade).await;
                    seen.lock().unwrap().push((hook, trade, rows));
                });
            }
            if paid.fail {
                return Err(sqlx::Error::Protocol(
                    "the grant failed after its write".into(),
                ));
            }
            Ok(())
        }
    };
    let truth = SqlTruth::new(tiers.truth_store(), Scope::new("coupon-grant"), grant);
    let consumer = TwoTier::new(truth)
        .sql_only(JsonField::new("/trade_no"))
        .unwrap();
    let seen_now = || seen.lock().unwrap().clone();

    // The first delivery: both hooks ran, in order, before the verdict, and each saw the
    // committed row from another connection.
    let first = consumer.process(Message::new(r#"{"trade_no":"A1"}"#)).await;
    assert!(matches!(first, Verdict::Processed { .. }), "{first:?}");
    let once = vec![
        ("first", "A1".to_owned(), 1),
        ("second", "A1".to_owned(), 1),
    ];
    assert_eq!(seen_now(), once);

    // A replay: the record answers, the business code and its hooks do not run.
    let replay = consumer.process(Message::new(r#"{"trade_no":"A1"}"#)).await;
    assert!(matches!(replay, Verdict::AlreadyDone { .. }), "{replay:?}");
    assert_eq!(seen_now(), once);

    // A business error after the write and the hooks: rolled back, no hook runs.
    let failed = consumer
        .process(Message::new(r#"{"trade_no":"A2","fail":true}"#))
        .await;
    assert!(matches!(failed, Verdict::Failed { .. }), "{failed:?}");
    assert_eq!(tiers.rows(Some("A2")).await, 0);
    assert_eq!(seen_now(), once);

    tiers.drop_tables().await;
}
