//! An outbox message enqueued in a local step commits with that step (and only with it), its
//! id derived from the run's key and the step: a resume never enqueues it twice. PostgreSQL
//! (`DATABASE_URL`).
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::atomic::{AtomicBool, Ordering};

use idempotency_core::{Fingerprint, IdempotencyKey, Outcome, Scope};
use idempotency_outbox::{Outbox, OutboxMessage, OutboxTable};
use idempotency_sql::PostgresStore;
use idempotency_steps::{Runner, Start, Started, StepError};

fn unique(prefix: &str) -> String {
    let mut bytes = [0u8; 6];
    getrandom::fill(&mut bytes).unwrap();
    format!("{prefix}_{}", hex::encode(bytes))
}

#[tokio::test]
async fn an_outbox_message_commits_with_its_step_once() {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let pool = match sqlx::PgPool::connect(&url).await {
        Ok(pool) => pool,
        Err(error) => {
            if std::env::var("CI").is_ok_and(|value| value == "true" || value == "1") {
                panic!("PostgreSQL is required in CI but unreachable: {error}");
            }
            eprintln!("SKIPPED: PostgreSQL unreachable ({error})");
            return;
        }
    };
    let store = PostgresStore::new(pool.clone())
        .with_table_name(&unique("steps_outbox"))
        .unwrap();
    store.migrate().await.unwrap();
    let outbox = Outbox::postgres(pool.clone())
        .with_table_name(&unique("outbox"))
        .unwrap();
    outbox.migrate().await.unwrap();
    let runner = Runner::new(store);
    let scope = Scope::new(unique("checkout"));
    let key = scope.storage_key(&IdempotencyKey::parse("K1").unwrap());
    let fingerprint = Fingerprint::of_bytes(b"{}");
    let events = Scope::new("coupon.grant");
    let fail_in_step = AtomicBool::new(true);
    let fail_after = AtomicBool::new(true);

    for attempt in 1..=3 {
        let start = Start::new(&key, scope.namespace(), &fingerprint, &b"{}"[..]);
        let Started::Run(mut run) = runner.start(start).await.unwrap() else {
            panic!("attempt {attempt} runs");
        };
        // The message's business key: the run's key and the step, stable across attempts.
        let event = IdempotencyKey::parse(&run.downstream_key("grant")).unwrap();
        let message = OutboxMessage::new(&events, &event, "coupons", b"{}".to_vec());
        let granted = run
            .local("grant", async |tx| {
                outbox.enqueue(tx, &message).await?;
                if fail_in_step.swap(false, Ordering::SeqCst) {
                    // The step fails after its enqueue: both roll back.
                    return Err(StepError::retry("the coupon rule is unreachable"));
                }
                Ok(message.id.clone())
            })
            .await;
        let granted = match granted {
            Ok(id) => id,
            Err(StepError::Retry(_)) => {
                run.pause().await;
                assert_eq!(
                    outbox.counts().await.unwrap().pending,
                    0,
                    "rolled back with its step"
                );
                continue;
            }
            Err(error) => panic!("{error}"),
        };
        if fail_after.swap(false, Ordering::SeqCst) {
            // A later failure: the run pauses after the step committed.
            run.pause().await;
            continue;
        }
        run.complete(&Outcome::new(200, granted.clone()))
            .await
            .unwrap();
        assert_eq!(attempt, 3);
        assert_eq!(granted, message.id);
    }
    let counts = outbox.counts().await.unwrap();
    assert_eq!(
        counts.pending, 1,
        "enqueued once, with its step: {counts:?}"
    );
}
