//! The consumer: the trade's key, the fast tier, and the grant in the coupon's transaction.

use std::time::Duration;

use idempotency_core::{BoxStore, Idempotency, MemoryStore, Scope};
use idempotency_queue::two_tier::{Business, Json, SqlTruth, TwoTier, TwoTierConsumer, Tx};
use idempotency_queue::{JsonField, Verdict};
use idempotency_redis::RedisStore;
use idempotency_sql::PostgresStore;
use serde::{Deserialize, Serialize};
use sqlx::{PgPool, Postgres};

use crate::Settings;

/// The payment gateway's event: a trade was paid.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Paid {
    /// The trade number: the business key.
    pub trade_no: String,
    /// Who gets the coupon.
    pub user_id: i64,
}

/// What a grant produced: the key's outcome, what every delivery of the trade is answered with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Granted {
    /// The `coupon_grants` row.
    pub coupon_id: i64,
}

/// How long the fast tier keeps a trade's record: longer than any redelivery or gateway retry.
const FAST_TIER_TTL: Duration = Duration::from_secs(48 * 60 * 60);

/// The consumer, whatever the broker: it reads the key from the payload's `trade_no`; with
/// `settings.redis_url`, Redis is its fast tier (memory otherwise); the grant runs in a
/// transaction of `pool` that first claims the trade in `coupon_grant_dedup` (created with
/// `coupon_grants` if missing). Built by `two_tier::TwoTier`: the consumer defers to the SQL
/// record whenever its fast tier cannot answer.
///
/// It prints `granted T1: {"coupon_id":17}` once a grant committed (then, with
/// `settings.ack_delay`, holds the ack), and `already granted T1: {"coupon_id":17}` when the
/// SQL record answers a redelivery of a trade granted before.
pub async fn coupon_consumer(
    settings: &Settings,
    pool: PgPool,
) -> Result<
    TwoTierConsumer<
        BoxStore,
        JsonField,
        PostgresStore,
        Json<Paid>,
        impl Business<Postgres, Json<Paid>>,
    >,
    Box<dyn std::error::Error + Send + Sync>,
> {
    crate::migrate(&pool).await?;
    let truth = PostgresStore::new(pool).with_table_name("coupon_grant_dedup")?;
    truth.migrate().await?;
    let fast_tier = match &settings.redis_url {
        Some(url) => BoxStore::new(RedisStore::connect(url).await?),
        None => BoxStore::new(MemoryStore::new()),
    };
    let hold_before_commit = settings.handler_delay;
    let hold_before_ack = settings.ack_delay;
    let grant = SqlTruth::new(
        truth,
        Scope::new("coupon-grant"),
        move |tx: Tx<Postgres>, Json(paid): Json<Paid>| async move {
            let coupon_id = sqlx::query_scalar(
                "INSERT INTO coupon_grants (trade_no, user_id) VALUES ($1, $2) RETURNING id",
            )
            .bind(&paid.trade_no)
            .bind(paid.user_id)
            .fetch_one(&mut *tx.conn().await)
            .await?;
            if !hold_before_commit.is_zero() {
                println!("holding {} before its commit", paid.trade_no);
                tokio::time::sleep(hold_before_commit).await;
            }
            let granted = Granted { coupon_id };
            // Once the coupon and its record are committed, before the ack: report it and (in
            // the fault drill) hold the ack. A process killed here has granted the coupon; the
            // redelivery finds the record and grants nothing more.
            let output = serde_json::to_string(&granted).unwrap_or_default();
            tx.after_commit(async move {
                println!("granted {}: {output}", paid.trade_no);
                if !hold_before_ack.is_zero() {
                    println!("holding {} after its commit, before its ack", paid.trade_no);
                    tokio::time::sleep(hold_before_ack).await;
                }
            });
            Ok::<_, sqlx::Error>(granted)
        },
    );
    let consumer = TwoTier::new(grant)
        .consumer(
            Idempotency::new(fast_tier).with_ttl(FAST_TIER_TTL),
            JsonField::new("/trade_no"),
        )?
        .on_verdict(|trade, verdict| {
            if let Verdict::AlreadyDone { output } = verdict {
                println!(
                    "already granted {trade}: {}",
                    String::from_utf8_lossy(output)
                );
            }
        });
    Ok(consumer)
}
