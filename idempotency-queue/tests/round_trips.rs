//! What two tiers cost on Redis, counted by a proxy that parses every command the consumer
//! sends (`REDIS_URL`; PostgreSQL `DATABASE_URL` is the truth): a new message is one round trip
//! (its claim; the truth commits with the work and the claim stays pending), the first copy of
//! a message asks the truth and settles the pending claim (two: the claim, the settle script),
//! and every later copy is one.
#![cfg(feature = "sql")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
#[allow(dead_code)] // The child-process helpers serve the broker tests.
mod tiers;

use std::sync::Arc;

use idempotency_queue::two_tier::TwoTier;
use idempotency_queue::{JsonField, Message, Verdict};
use idempotency_test::redis_commands::{Log, commands_of, counting_proxy, upstream};
use tiers::Tiers;

const MESSAGES: usize = 50;

#[tokio::test]
async fn one_round_trip_per_new_message_and_per_settled_copy() {
    let Some(tiers) = Tiers::new(0, "idem-round-trips").await else {
        return;
    };
    let log: Log = Arc::default();
    let proxy = counting_proxy(
        upstream("REDIS_URL", "redis://127.0.0.1:6379"),
        Arc::clone(&log),
    )
    .await;
    let consumer = TwoTier::new(tiers.truth())
        .consumer(
            tiers.fast_path_through(&proxy).await,
            JsonField::new("/trade_no"),
        )
        .unwrap();
    let message = |i: usize| Message::new(format!(r#"{{"trade_no":"R{i}"}}"#));
    // The connection's set-up, and the first use of each command (a script's first load, the
    // store learning the server's native commands), are not a message's cost.
    let warm = consumer.process(message(MESSAGES)).await;
    assert!(matches!(warm, Verdict::Processed { .. }), "{warm:?}");
    let settled = consumer.process(message(MESSAGES)).await;
    assert!(
        matches!(settled, Verdict::AlreadyDone { .. }),
        "{settled:?}"
    );

    // Every message once, in order: the verdicts and the commands sent for them.
    let round = || {
        commands_of(&log, async {
            let mut verdicts = Vec::new();
            for i in 0..MESSAGES {
                verdicts.push(consumer.process(message(i)).await);
            }
            verdicts
        })
    };
    let (verdicts, sent) = round().await;
    assert!(
        verdicts.iter().all(|verdict| matches!(
            verdict,
            Verdict::Processed {
                recorded: false,
                ..
            }
        )),
        "{verdicts:?}"
    );
    assert_eq!(
        sent.len(),
        MESSAGES,
        "one round trip per new message: {sent:?}"
    );
    assert_eq!(tiers.rows(None).await, i64::try_from(MESSAGES + 1).unwrap());

    // The first copy meets the pending claim: the truth answers, and the claim is settled in
    // one script.
    let (first, sent) = round().await;
    assert!(
        first
            .iter()
            .all(|verdict| matches!(verdict, Verdict::AlreadyDone { .. })),
        "{first:?}"
    );
    assert_eq!(sent.len(), 2 * MESSAGES, "claim, settle: {sent:?}");
    assert!(
        sent.iter()
            .skip(1)
            .step_by(2)
            .all(|command| command == "EVALSHA"),
        "the settle is one script: {sent:?}"
    );

    // Later copies replay from the fast tier: one round trip, no truth.
    let (later, sent) = round().await;
    assert!(
        later
            .iter()
            .all(|verdict| matches!(verdict, Verdict::Replayed { .. })),
        "{later:?}"
    );
    assert_eq!(
        sent.len(),
        MESSAGES,
        "one round trip per later copy: {sent:?}"
    );
    for (copy, settled) in later.iter().zip(&first) {
        assert_eq!(copy.output(), settled.output());
    }
    assert_eq!(tiers.rows(None).await, i64::try_from(MESSAGES + 1).unwrap());
    tiers.drop_tables().await;
}
