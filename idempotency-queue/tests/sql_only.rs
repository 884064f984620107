//! A receiver without a fast tier, against real PostgreSQL: the record claimed in the business
//! transaction decides every delivery, duplicates and concurrent copies included.
#![cfg(feature = "sql")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
#[allow(dead_code)] // The child-process and fast-tier helpers serve the broker tests.
mod tiers;

use futures_util::future::join_all;
use idempotency_queue::two_tier::{TierConfigError, TwoTier};
use idempotency_queue::{JsonField, Message, Verdict};
use std::time::Duration;
use tiers::Tiers;

#[tokio::test]
async fn a_sql_only_consumer_runs_each_key_once_and_answers_duplicates_from_the_truth() {
    let Some(tiers) = Tiers::new(0, "idem-sql-only").await else {
        return;
    };
    let consumer = TwoTier::new(tiers.truth())
        .sql_only(JsonField::new("/trade_no"))
        .unwrap();
    assert!(consumer.engine().is_none(), "no fast tier");

    let first = consumer.process(Message::new(r#"{"trade_no":"S1"}"#)).await;
    let Verdict::Processed { output, .. } = &first else {
        panic!("{first:?}")
    };
    let again = consumer.process(Message::new(r#"{"trade_no":"S1"}"#)).await;
    assert_eq!(
        again,
        Verdict::AlreadyDone {
            output: output.clone()
        }
    );

    // Twenty copies of a new key at once: one runs, the others wait on its transaction and
    // get its output.
    let copies =
        join_all((0..20).map(|_| consumer.process(Message::new(r#"{"trade_no":"S2"}"#)))).await;
    let processed = copies
        .iter()
        .filter(|verdict| matches!(verdict, Verdict::Processed { .. }))
        .count();
    assert_eq!(processed, 1, "{copies:?}");
    assert!(
        copies.iter().all(|verdict| verdict.output().is_some()),
        "{copies:?}"
    );
    assert_eq!(tiers.rows(Some("S1")).await, 1);
    assert_eq!(tiers.rows(Some("S2")).await, 1);

    let refused = TwoTier::new(tiers.truth().with_ttl(Duration::from_secs(24 * 3600)))
        .retry_horizon(Duration::from_secs(3 * 24 * 3600))
        .sql_only(JsonField::new("/trade_no"))
        .unwrap_err();
    assert!(
        matches!(refused, TierConfigError::ShorterThanHorizon { .. }),
        "{refused}"
    );
    tiers.drop_tables().await;
}
