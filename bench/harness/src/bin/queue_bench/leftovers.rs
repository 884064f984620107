//! What a killed run left behind, removed when the next one starts: its PostgreSQL tables, the
//! record tables' fencing sequences and schema rows, and its NATS streams. Its RabbitMQ queues
//! expire on their own (`x-expires`) and its Redis keys with their TTL. Only runs that started
//! over an hour ago are swept: no run lasts that long, so one running beside this keeps its own.

use std::time::Duration;

use futures_util::TryStreamExt;
use sqlx::PgPool;

use crate::Error;

/// How old a run's leftovers must be to be swept.
const ABANDONED_AFTER: Duration = Duration::from_secs(60 * 60);

/// This bench's tables and sequences: `bench_<kind>_<nonce>`, a record table's sequence
/// `…_token_seq`.
const OWN_RELATIONS: &str =
    "^bench_(coupons|dedup|by_hand|by_hand_output|post_mortem)_[0-9]+(_token_seq)?$";

/// This bench's NATS streams: `QUEUE_BENCH_<nonce>_<VARIANT>`.
const OWN_STREAMS: &str = "QUEUE_BENCH_";

/// Whether `name` belongs to a run that started before `cutoff`: its nonce (microseconds since
/// the epoch at the run's start) is the first number in it.
fn abandoned(name: &str, cutoff: u128) -> bool {
    let nonce: String = name
        .chars()
        .skip_while(|c| !c.is_ascii_digit())
        .take_while(char::is_ascii_digit)
        .collect();
    nonce.parse::<u128>().is_ok_and(|nonce| nonce < cutoff)
}

/// Removes the leftovers of runs that started over an hour before `nonce` (this run's start)
/// and says how many there were.
pub(crate) async fn sweep(
    pool: &PgPool,
    js: &async_nats::jetstream::Context,
    nonce: u128,
) -> Result<(), Error> {
    let cutoff = nonce.saturating_sub(ABANDONED_AFTER.as_micros());
    let mut swept = 0;
    let relations: Vec<(String, bool)> = sqlx::query_as(
        "SELECT c.relname::text, c.relkind = 'S' FROM pg_class c \
         JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'S') AND c.relname ~ $1",
    )
    .bind(OWN_RELATIONS)
    .fetch_all(pool)
    .await?;
    for (name, sequence) in relations {
        if abandoned(&name, cutoff) {
            let kind = if sequence { "SEQUENCE" } else { "TABLE" };
            sqlx::query(&format!("DROP {kind} IF EXISTS \"{name}\""))
                .execute(pool)
                .await?;
            swept += 1;
        }
    }
    // The versions table exists once any record table was migrated on this database.
    let versions: Vec<String> =
        sqlx::query_scalar("SELECT table_name FROM idempotency_schema WHERE table_name ~ $1")
            .bind(OWN_RELATIONS)
            .fetch_all(pool)
            .await
            .unwrap_or_default();
    for name in versions {
        if abandoned(&name, cutoff) {
            sqlx::query("DELETE FROM idempotency_schema WHERE table_name = $1")
                .bind(&name)
                .execute(pool)
                .await?;
            swept += 1;
        }
    }
    let streams: Vec<String> = js.stream_names().try_collect().await?;
    for name in streams {
        if name.starts_with(OWN_STREAMS) && abandoned(&name, cutoff) {
            js.delete_stream(&name).await?;
            swept += 1;
        }
    }
    if swept > 0 {
        println!("removed {swept} leftovers of runs that started over an hour ago");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::abandoned;

    #[test]
    fn a_run_is_abandoned_by_its_start() {
        assert!(abandoned("bench_by_hand_output_100", 101));
        assert!(abandoned("bench_dedup_100_token_seq", 101));
        assert!(abandoned("QUEUE_BENCH_100_TWO_TIER_AGAIN", 101));
        assert!(!abandoned("bench_dedup_101", 101));
        assert!(!abandoned("bench_dedup", 101));
    }
}
