//! A consumer whose handler has several steps, against real PostgreSQL (`DATABASE_URL`): a
//! delivery that dies part-way (a panic) or fails a step that may succeed later is redelivered
//! and resumes after its last checkpoint; every local step commits once per key, the foreign
//! call carries one downstream key whatever the redeliveries, and copies of a key run it once.
#![cfg(all(feature = "steps", feature = "sql"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::future::join_all;
use idempotency_core::{Idempotency, MemoryStore, Scope};
use idempotency_queue::steps::{StepsFn, StepsHandler};
use idempotency_queue::{IdempotentConsumer, JsonField, Message, Verdict};
use idempotency_sql::PostgresStore;
use idempotency_steps::{Runner, StepError};

fn unique(prefix: &str) -> String {
    let mut bytes = [0u8; 6];
    getrandom::fill(&mut bytes).unwrap();
    format!("{prefix}_{}", hex::encode(bytes))
}

/// What the steps did, across deliveries: the foreign calls by downstream key, and the
/// failures still to inject.
#[derive(Default)]
struct World {
    calls: Mutex<HashMap<String, usize>>,
    die_after_reserve: AtomicBool,
    capture_times_out: AtomicBool,
}

fn steps(world: Arc<World>, effects: String) -> StepsFn<PostgresStore> {
    Box::new(move |run, job| {
        let (world, effects) = (Arc::clone(&world), effects.clone());
        Box::pin(async move {
            let trade = job.key.as_str().to_owned();
            let insert = format!("INSERT INTO {effects} (trade, step) VALUES ($1, $2)");
            run.local("reserve", async |tx| {
                sqlx::query(&insert)
                    .bind(&trade)
                    .bind("reserve")
                    .execute(&mut **tx)
                    .await?;
                Ok(())
            })
            .await?;
            if world.die_after_reserve.swap(false, Ordering::SeqCst) {
                // Dies once reserve has committed (it commits with the next step otherwise).
                run.commit().await?;
                panic!("the consumer dies after reserve");
            }
            let capture: String = run
                .foreign("capture", async |key| {
                    *world
                        .calls
                        .lock()
                        .unwrap()
                        .entry(key.to_owned())
                        .or_default() += 1;
                    if world.capture_times_out.swap(false, Ordering::SeqCst) {
                        return Err(StepError::retry("the provider timed out"));
                    }
                    Ok(format!("cap-{}", &key[..8]))
                })
                .await?;
            run.local("grant", async |tx| {
                sqlx::query(&insert)
                    .bind(&trade)
                    .bind("grant")
                    .execute(&mut **tx)
                    .await?;
                Ok(())
            })
            .await?;
            Ok(serde_json::json!({ "capture": capture }))
        })
    })
}

#[tokio::test]
async fn redeliveries_resume_after_the_last_checkpoint() {
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
    let table = unique("steps_msgs");
    let store = PostgresStore::new(pool.clone())
        .with_table_name(&table)
        .unwrap();
    store.migrate().await.unwrap();
    let effects = format!("{table}_effects");
    sqlx::query(&format!(
        "CREATE TABLE {effects} (trade TEXT NOT NULL, step TEXT NOT NULL)"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let world = Arc::new(World::default());
    let scope = Scope::new(unique("coupons"));
    let handler = StepsHandler::new(
        Runner::new(store),
        scope.clone(),
        steps(Arc::clone(&world), effects.clone()),
    );
    let consumer = IdempotentConsumer::new(
        Idempotency::new(MemoryStore::new()),
        scope,
        JsonField::new("/trade_no"),
        handler,
    );
    let rows = |trade: &'static str, step: &'static str| {
        let (pool, effects) = (pool.clone(), effects.clone());
        async move {
            let (count,): (i64,) = sqlx::query_as(&format!(
                "SELECT count(*) FROM {effects} WHERE trade = $1 AND step = $2"
            ))
            .bind(trade)
            .bind(step)
            .fetch_one(&pool)
            .await
            .unwrap();
            count
        }
    };
    let message = || Message::new(r#"{"trade_no":"T1"}"#);
    // A delivery, redelivered (as the broker would, bounded) while the key is in flight: a
    // dead consumer's connection, and with it its hold, closes a moment after it died.
    let deliver = |message: Message| {
        let consumer = &consumer;
        async move {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            loop {
                let verdict = consumer.process(message.clone()).await;
                if !matches!(verdict, Verdict::InFlight { .. })
                    || std::time::Instant::now() > deadline
                {
                    return verdict;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
    };

    // The first delivery dies after reserve; the second fails the capture (it may succeed
    // later); the third resumes after reserve and completes.
    world.die_after_reserve.store(true, Ordering::SeqCst);
    let died = consumer.process(message()).await;
    assert!(matches!(died, Verdict::Failed { .. }), "{died:?}");
    world.capture_times_out.store(true, Ordering::SeqCst);
    let timed_out = deliver(message()).await;
    assert!(matches!(timed_out, Verdict::Failed { .. }), "{timed_out:?}");
    let done = deliver(message()).await;
    let Verdict::Processed { output, .. } = &done else {
        panic!("{done:?}")
    };
    assert!(String::from_utf8_lossy(output).contains("cap-"), "{done:?}");
    assert_eq!(
        (rows("T1", "reserve").await, rows("T1", "grant").await),
        (1, 1)
    );
    let calls = world.calls.lock().unwrap().clone();
    assert_eq!(
        calls.len(),
        1,
        "one downstream key across redeliveries: {calls:?}"
    );
    assert_eq!(
        calls.values().sum::<usize>(),
        2,
        "the timed-out call, then its retry"
    );

    // A redelivery after completion runs nothing and answers the same output.
    let again = deliver(message()).await;
    assert_eq!(again.output(), Some(output), "{again:?}");
    assert_eq!(rows("T1", "reserve").await, 1);

    // Twenty copies of a new key at once: one run.
    let copies =
        join_all((0..20).map(|_| consumer.process(Message::new(r#"{"trade_no":"T2"}"#)))).await;
    let processed = copies
        .iter()
        .filter(|verdict| matches!(verdict, Verdict::Processed { .. }))
        .count();
    assert_eq!(processed, 1, "{copies:?}");
    assert_eq!(
        (rows("T2", "reserve").await, rows("T2", "grant").await),
        (1, 1)
    );
}
