//! Consumers keyed as messages in both tiers (key derivation 3), after derivation 2 keyed them
//! as requests in their fast tier and as transactions in their SQL truth, against Redis and
//! PostgreSQL: a redelivery of a message the previous release handled is still a duplicate
//! with previous keys read, and the two tiers' records of one message share one storage key.
#![cfg(feature = "sql")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
#[allow(dead_code)] // The child-process helpers serve the broker tests.
mod tiers;

use bytes::Bytes;
use idempotency_core::{
    Decision, Fingerprint, IdempotencyKey, InFlightPolicy, Mechanism, Outcome, Scope, Store,
};
use idempotency_queue::two_tier::TwoTier;
use idempotency_queue::{Header, Message, Verdict};
use idempotency_sql::{TxClaim, TxStore};
use tiers::Tiers;

const SCOPE: &str = "coupon-grant";

fn delivery(key: &str) -> Message {
    Message::new(format!("grant a coupon for {key}")).with_header("business-key", key)
}

/// The consumer's fingerprint of [`delivery`]: its payload.
fn fingerprint(key: &str) -> Fingerprint {
    Fingerprint::of_bytes(format!("grant a coupon for {key}").as_bytes())
}

/// The fast tier's record of a message handled by the previous release: under the key of a
/// request.
#[tokio::test]
async fn a_fast_tier_record_of_the_previous_release_is_a_duplicate_with_previous_keys_read() {
    let Some(tiers) = Tiers::new(0, "idem-upgrade-fast").await else {
        return;
    };
    let scope = Scope::new(SCOPE);
    let previous = tiers.fast_path().await;
    for key in ["T1", "T2"] {
        let claimed = previous
            .claim(&scope, key, &fingerprint(key), InFlightPolicy::Reject)
            .await
            .unwrap();
        let Decision::Execute(execution) = claimed else {
            panic!("a fresh key");
        };
        execution.complete(Outcome::new(0, "41")).await.unwrap();
    }

    let reading = TwoTier::new(tiers.truth())
        .consumer(
            tiers.fast_path().await.with_previous_keys(true),
            Header::new("business-key"),
        )
        .unwrap();
    assert_eq!(
        reading.process(delivery("T1")).await,
        Verdict::Replayed {
            output: Bytes::from_static(b"41")
        }
    );
    assert_eq!(tiers.rows(Some("T1")).await, 0, "not run again");

    // Without previous keys read, the fast tier misses it (the truth, which never saw it,
    // runs it): why the setting exists.
    let plain = TwoTier::new(tiers.truth())
        .consumer(tiers.fast_path().await, Header::new("business-key"))
        .unwrap();
    assert!(matches!(
        plain.process(delivery("T2")).await,
        Verdict::Processed { .. }
    ));
    assert_eq!(tiers.rows(Some("T2")).await, 1);
    tiers.drop_tables().await;
}

/// The truth's record of a message handled by the previous release: under the key of a
/// transaction.
#[tokio::test]
async fn a_truth_record_of_the_previous_release_is_a_duplicate_with_previous_keys_read() {
    let Some(tiers) = Tiers::new(0, "idem-upgrade-truth").await else {
        return;
    };
    let scope = Scope::new(SCOPE);
    let store = tiers.truth_store();
    for key in ["T3", "T4"] {
        let mut tx = store.begin().await.unwrap();
        let key = IdempotencyKey::parse(key).unwrap();
        let claim = store
            .claim_in_tx(&mut tx, &scope, &key, &fingerprint(key.as_str()))
            .await
            .unwrap();
        let TxClaim::Execute(lease) = claim else {
            panic!("a fresh key");
        };
        store
            .complete_in_tx(&mut tx, lease, &Outcome::new(0, "42"))
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
    let reading = TwoTier::new(tiers.truth_with_store(store.clone().with_previous_keys(true)))
        .sql_only(Header::new("business-key"))
        .unwrap();
    assert_eq!(
        reading.process(delivery("T3")).await,
        Verdict::AlreadyDone {
            output: Bytes::from_static(b"42")
        }
    );
    assert_eq!(tiers.rows(Some("T3")).await, 0, "not run again");

    let plain = TwoTier::new(tiers.truth_with_store(store))
        .sql_only(Header::new("business-key"))
        .unwrap();
    assert!(matches!(
        plain.process(delivery("T4")).await,
        Verdict::Processed { .. }
    ));
    assert_eq!(
        tiers.rows(Some("T4")).await,
        1,
        "without the setting it runs"
    );
    tiers.drop_tables().await;
}

/// Both tiers keep a message's records under one storage key, each saying it is a message's,
/// keyed by derivation 3.
#[tokio::test]
async fn both_tiers_keep_a_message_under_one_storage_key() {
    let Some(tiers) = Tiers::new(0, "idem-upgrade-joined").await else {
        return;
    };
    let scope = Scope::new(SCOPE);
    let consumer = TwoTier::new(tiers.truth())
        .consumer(tiers.fast_path().await, Header::new("business-key"))
        .unwrap();
    assert!(matches!(
        consumer.process(delivery("T5")).await,
        Verdict::Processed { .. }
    ));
    // The first copy settles the fast tier's pending claim with the truth's output.
    assert!(matches!(
        consumer.process(delivery("T5")).await,
        Verdict::AlreadyDone { .. }
    ));
    let key = scope.storage_key_for(Mechanism::Message, "T5");
    let fast = consumer.engine().unwrap().store().get(&key).await.unwrap();
    let truth = consumer.handler().store().get(&key).await.unwrap();
    for record in [
        fast.expect("the fast tier's record"),
        truth.expect("the truth's"),
    ] {
        assert_eq!(
            (record.mechanism, record.key_derivation),
            (Some(Mechanism::Message), Some(3))
        );
        assert_eq!(
            record.outcome.unwrap().body,
            consumer_output(&tiers, "T5").await
        );
    }
    tiers.drop_tables().await;
}

/// The id of the business row of `key`, as the truth's business code answers it.
async fn consumer_output(tiers: &Tiers, key: &str) -> Bytes {
    let id: i64 = sqlx::query_scalar(&format!(
        "SELECT id FROM {} WHERE business_key = $1",
        tiers.coupons_table()
    ))
    .bind(key)
    .fetch_one(tiers.pool())
    .await
    .unwrap();
    Bytes::from(serde_json::to_vec(&id).unwrap())
}
