//! The consumer: the trade's key, the fast tier, and the grant in the coupon's transaction.

use std::sync::Arc;
use std::time::Duration;

use idempotency_core::redis::RedisStore;
use idempotency_core::sql::PostgresStore;
use idempotency_core::{BoxStore, Idempotency, MemoryStore, Scope};
use idempotency_queue::two_tier::{Json, SqlTruth, Tx};
use idempotency_queue::{Handled, Handler, IdempotentConsumer, Job, JsonField};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

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
/// `coupon_grants` if missing).
pub async fn coupon_consumer(
    settings: &Settings,
    pool: PgPool,
) -> Result<
    IdempotentConsumer<BoxStore, JsonField, impl Handler>,
    Box<dyn std::error::Error + Send + Sync>,
> {
    crate::migrate(&pool).await?;
    let truth = PostgresStore::new(pool).with_table_name("coupon_grant_dedup")?;
    truth.migrate().await?;
    let fast_tier = match &settings.redis_url {
        Some(url) => BoxStore::new(RedisStore::connect(url).await?),
        None => BoxStore::new(MemoryStore::new()),
    };
    let scope = Scope::new("coupon-grant");
    let hold_before_commit = settings.handler_delay;
    let grant = SqlTruth::new(
        truth,
        scope.clone(),
        move |tx: Tx<sqlx::Postgres>, Json(paid): Json<Paid>| async move {
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
            Ok::<_, sqlx::Error>(Granted { coupon_id })
        },
    );
    // A step after the grant's commit, in a handler of our own: it reports what happened and
    // (in the fault drill) holds the ack. Wrapping hides that `SqlTruth` guards itself, so the
    // consumer is told (`with_guarded_handler`): its fast tier then hands a trade it cannot
    // answer (a dead consumer's claim, Redis down) to the SQL record at once.
    let grant = Arc::new(grant);
    let hold_before_ack = settings.ack_delay;
    let report = move |job: Job| {
        let grant = Arc::clone(&grant);
        async move {
            let handled = grant.run(&job).await?;
            match &handled {
                Handled::Output(output) => {
                    println!("granted {}: {}", job.key, String::from_utf8_lossy(output));
                    if !hold_before_ack.is_zero() {
                        println!("holding {} after its commit, before its ack", job.key);
                        tokio::time::sleep(hold_before_ack).await;
                    }
                }
                Handled::AlreadyDone(output) => println!(
                    "already granted {}: {}",
                    job.key,
                    String::from_utf8_lossy(output)
                ),
                _ => {}
            }
            Ok::<_, idempotency_queue::two_tier::TruthError<sqlx::Error>>(handled)
        }
    };
    Ok(IdempotentConsumer::new(
        Idempotency::new(fast_tier).with_ttl(FAST_TIER_TTL),
        scope,
        JsonField::new("/trade_no"),
        report,
    )
    .with_guarded_handler(true))
}
