//! How long each tier remembers a key, and who decides, against real Redis and PostgreSQL:
//! the truth outlives the fast tier and every retry horizon, a configuration where it would not
//! is refused when the consumer is built, and a consumer that does not defer to its truth is
//! loud.
#![cfg(feature = "sql")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
#[allow(dead_code)] // The child-process helpers serve the broker tests.
mod tiers;

use std::sync::Arc;
use std::time::Duration;

use idempotency_queue::two_tier::{DEFAULT_TRUTH_TTL, TierConfigError, TwoTier};
use idempotency_queue::{Handler, IdempotentConsumer, Job, JsonField, Message, Verdict};
use idempotency_test::captured;
use tiers::Tiers;

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);

/// How long the truth keeps `key`'s completed record, by the database's own columns.
async fn truth_keeps(tiers: &Tiers) -> Duration {
    let seconds: f64 = sqlx::query_scalar(&format!(
        "SELECT EXTRACT(EPOCH FROM expires_at - completed_at)::float8 FROM {} \
         WHERE state = 'completed'",
        tiers.dedup_table()
    ))
    .fetch_one(tiers.pool())
    .await
    .unwrap();
    Duration::from_secs_f64(seconds)
}

#[tokio::test]
async fn the_truth_keeps_a_record_seven_days_by_default_longer_than_the_senders_retry() {
    let Some(tiers) = Tiers::new(0, "idem-lifetimes-default").await else {
        return;
    };
    let consumer = TwoTier::new(tiers.truth())
        // Stripe retries webhooks for 3 days; Alipay notifies for about 25 h.
        .retry_horizon(3 * DAY)
        .consumer(tiers.fast_path().await, JsonField::new("/trade_no"))
        .unwrap();
    let verdict = consumer
        .process(Message::new(r#"{"trade_no":"T-life-1"}"#))
        .await;
    assert!(matches!(verdict, Verdict::Processed { .. }), "{verdict:?}");
    assert_eq!(DEFAULT_TRUTH_TTL, 7 * DAY);
    assert_eq!(truth_keeps(&tiers).await, 7 * DAY);
    tiers.drop_tables().await;
}

/// A key the truth forgot (its record past its TTL, not purged yet) is new again: a first copy,
/// whose record written last meets the expired one, takes it over and runs once; a copy after
/// it replays.
#[tokio::test]
async fn a_first_copy_runs_again_once_the_truth_forgot_the_key() {
    let Some(tiers) = Tiers::new(0, "idem-lifetimes-forgotten").await else {
        return;
    };
    let trade = "T-life-forgotten";
    let message = || Message::new(format!(r#"{{"trade_no":"{trade}"}}"#));
    let consumer = |fast| {
        TwoTier::new(tiers.truth())
            .consumer(fast, JsonField::new("/trade_no"))
            .unwrap()
    };
    let first = consumer(tiers.fast_path().await).process(message()).await;
    assert!(matches!(first, Verdict::Processed { .. }), "{first:?}");
    sqlx::query(&format!(
        "UPDATE {} SET expires_at = now() - interval '1 second'",
        tiers.dedup_table()
    ))
    .execute(tiers.pool())
    .await
    .unwrap();

    // A fast tier that never saw the key: the next delivery is a first copy again.
    let elsewhere = consumer(tiers.fast_path_elsewhere().await);
    let again = elsewhere.process(message()).await;
    assert!(matches!(again, Verdict::Processed { .. }), "{again:?}");
    assert_eq!(tiers.rows(Some(trade)).await, 2, "run once more, once");
    let replay = elsewhere.process(message()).await;
    assert!(matches!(replay, Verdict::AlreadyDone { .. }), "{replay:?}");
    assert_eq!(tiers.rows(Some(trade)).await, 2);
    tiers.drop_tables().await;
}

#[tokio::test]
async fn the_truths_own_ttl_is_the_one_its_records_are_kept_for() {
    let Some(tiers) = Tiers::new(0, "idem-lifetimes-own").await else {
        return;
    };
    let consumer = TwoTier::new(tiers.truth().with_ttl(30 * DAY))
        .consumer(tiers.fast_path().await, JsonField::new("/trade_no"))
        .unwrap();
    consumer
        .process(Message::new(r#"{"trade_no":"T-life-2"}"#))
        .await;
    assert_eq!(truth_keeps(&tiers).await, 30 * DAY);
    tiers.drop_tables().await;
}

#[tokio::test]
async fn a_fast_tier_that_outlives_its_truth_is_refused_when_built() {
    let Some(tiers) = Tiers::new(0, "idem-lifetimes-refused").await else {
        return;
    };
    let fast_tier = tiers.fast_path().await.with_ttl(48 * HOUR);
    let refused = TwoTier::new(tiers.truth().with_ttl(24 * HOUR))
        .consumer(fast_tier.clone(), JsonField::new("/trade_no"))
        .unwrap_err();
    assert_eq!(
        refused,
        TierConfigError::FastTierOutlivesTruth {
            fast_ttl: 48 * HOUR,
            fast_lease: Duration::from_secs(2),
            truth_ttl: 24 * HOUR,
        }
    );
    let text = refused.to_string();
    assert!(
        text.contains("fast-tier TTL 2d") && text.contains("TTL 1d"),
        "{text}"
    );

    let too_short = TwoTier::new(tiers.truth().with_ttl(24 * HOUR))
        .retry_horizon(25 * HOUR)
        .consumer(tiers.fast_path().await, JsonField::new("/trade_no"))
        .unwrap_err();
    assert!(
        too_short
            .to_string()
            .contains("shorter than the retry horizon 1d1h"),
        "{too_short}"
    );
    // The defaults agree: a 48 h fast tier in front of the 7-day truth.
    assert!(
        TwoTier::new(tiers.truth())
            .retry_horizon(3 * DAY)
            .consumer(fast_tier, JsonField::new("/trade_no"))
            .is_ok()
    );
    tiers.drop_tables().await;
}

#[test]
fn a_wrapper_that_hides_the_truth_from_its_consumer_is_loud() {
    let (rows, capture) = captured(async {
        let tiers = Tiers::new(0, "idem-lifetimes-wrapper").await?;
        // A handler of the user's own around the truth that forgets `guards_itself`.
        let truth = Arc::new(tiers.truth());
        let wrapper = move |job: Job| {
            let truth = Arc::clone(&truth);
            async move { truth.handle(job).await.map_err(|error| error.to_string()) }
        };
        assert!(!Handler::guards_itself(&wrapper));
        let consumer = IdempotentConsumer::new(
            tiers.fast_path().await,
            tiers.truth().scope().clone(),
            JsonField::new("/trade_no"),
            wrapper,
        );
        for _ in 0..2 {
            let verdict = consumer
                .process(Message::new(r#"{"trade_no":"T-wrapped"}"#))
                .await;
            assert!(verdict.output().is_some(), "{verdict:?}");
        }
        let rows = tiers.rows(Some("T-wrapped")).await;
        tiers.drop_tables().await;
        Some(rows)
    });
    let Some(rows) = rows else { return };
    assert_eq!(rows, 1, "the work still ran once");
    let text = capture.text();
    assert_eq!(
        text.matches("does not defer to it").count(),
        1,
        "one ERROR per truth: {text}"
    );

    // Built by `TwoTier`, the consumer always defers: nothing to warn about.
    let (_, capture) = captured(async {
        let Some(tiers) = Tiers::new(0, "idem-lifetimes-built").await else {
            return;
        };
        let consumer = TwoTier::new(tiers.truth())
            .consumer(tiers.fast_path().await, JsonField::new("/trade_no"))
            .unwrap();
        let verdict = consumer
            .process(Message::new(r#"{"trade_no":"T-built"}"#))
            .await;
        assert!(matches!(verdict, Verdict::Processed { .. }), "{verdict:?}");
        tiers.drop_tables().await;
    });
    assert!(
        !capture.text().contains("does not defer"),
        "{}",
        capture.text()
    );
}

#[test]
fn a_consumer_built_by_hand_around_a_shorter_lived_truth_is_logged_at_error() {
    let (built, capture) = captured(async {
        let Some(tiers) = Tiers::new(0, "idem-lifetimes-by-hand").await else {
            return false;
        };
        let truth = tiers.truth().with_ttl(24 * HOUR);
        let scope = truth.scope().clone();
        let _consumer = IdempotentConsumer::new(
            tiers.fast_path().await.with_ttl(48 * HOUR),
            scope,
            JsonField::new("/trade_no"),
            truth,
        );
        tiers.drop_tables().await;
        true
    });
    if built {
        let text = capture.text();
        assert!(text.contains("the fast tier outlives its truth"), "{text}");
    }
}
