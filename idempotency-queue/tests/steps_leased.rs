//! A consumer whose handler has several steps, as leased runs on Redis (`REDIS_URL`, default
//! `redis://127.0.0.1:6379`) and on the memory store (`StepsHandler::leased`): a delivery that
//! dies after a step's checkpoint (a panic) is redelivered and resumes after that step, never
//! calling it again; a redelivery after completion runs nothing; copies of a new key run it
//! once.
#![cfg(feature = "steps")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::join_all;
use idempotency_core::{Idempotency, MemoryStore, Scope, Store};
use idempotency_operations::Operations;
use idempotency_queue::steps::{StepsFn, StepsHandler};
use idempotency_queue::{IdempotentConsumer, JsonField, Message, Verdict};
use idempotency_steps::leased::{Leased, Runner};

/// A lease short enough that a redelivery waits for a dead consumer's.
const SHORT: Duration = Duration::from_millis(300);
/// How long a delivery waits for a live (or dead) owner's run: far beyond [`SHORT`].
const WAIT: Duration = Duration::from_secs(10);

fn unique(prefix: &str) -> String {
    let mut bytes = [0u8; 6];
    getrandom::fill(&mut bytes).unwrap();
    format!("{prefix}_{}", hex::encode(bytes))
}

/// What the steps did, across deliveries.
#[derive(Default)]
struct World {
    reserve: AtomicUsize,
    /// The downstream keys the captures were sent with, in order.
    captures: Mutex<Vec<String>>,
    die_after_reserve: AtomicBool,
}

impl World {
    fn counts(&self) -> [usize; 2] {
        [
            self.reserve.load(Ordering::SeqCst),
            self.captures.lock().unwrap().len(),
        ]
    }
}

/// Reserve, then capture (both foreign), then the output.
fn steps<S: Store + Operations + 'static>(world: Arc<World>) -> StepsFn<Leased<S>> {
    Box::new(move |run, job| {
        let world = Arc::clone(&world);
        Box::pin(async move {
            let trade = job.key.as_str().to_owned();
            run.foreign("reserve", async |_| {
                world.reserve.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .await?;
            if world.die_after_reserve.swap(false, Ordering::SeqCst) {
                panic!("the consumer dies after reserve's checkpoint");
            }
            let capture: String = run
                .foreign("capture", async |key| {
                    world.captures.lock().unwrap().push(key.to_owned());
                    Ok(format!("cap-{trade}-{}", &key[..8]))
                })
                .await?;
            Ok(serde_json::json!({ "capture": capture }))
        })
    })
}

async fn redeliveries_resume_after_the_last_checkpoint<S>(store: S)
where
    S: Store + Operations + 'static,
{
    let world = Arc::new(World::default());
    let scope = Scope::new(unique("coupons"));
    let runner = Runner::new(store).with_lease(SHORT).with_wait(WAIT);
    let handler = StepsHandler::leased(runner, scope.clone(), steps::<S>(Arc::clone(&world)));
    let consumer = IdempotentConsumer::new(
        Idempotency::new(MemoryStore::new()),
        scope,
        JsonField::new("/trade_no"),
        handler,
    );
    let message = || Message::new(r#"{"trade_no":"T1"}"#);

    // The first delivery dies after reserve's checkpoint; the redelivery waits for its lease
    // to end, takes the run over after reserve and completes.
    world.die_after_reserve.store(true, Ordering::SeqCst);
    let died = consumer.process(message()).await;
    assert!(matches!(died, Verdict::Failed { .. }), "{died:?}");
    assert_eq!(world.counts(), [1, 0]);
    let done = consumer.process(message()).await;
    let Verdict::Processed { output, .. } = &done else {
        panic!("{done:?}")
    };
    assert!(
        String::from_utf8_lossy(output).contains("cap-T1-"),
        "{done:?}"
    );
    assert_eq!(world.counts(), [1, 1], "reserve never ran again");

    // A redelivery after completion runs nothing and answers the same output.
    let again = consumer.process(message()).await;
    assert_eq!(again.output(), Some(output), "{again:?}");
    assert_eq!(world.counts(), [1, 1]);

    // Twenty copies of a new key at once: one run, every copy the same output.
    let copies =
        join_all((0..20).map(|_| consumer.process(Message::new(r#"{"trade_no":"T2"}"#)))).await;
    let processed = copies
        .iter()
        .filter(|verdict| matches!(verdict, Verdict::Processed { .. }))
        .count();
    assert_eq!(processed, 1, "{copies:?}");
    let first = copies.iter().find_map(Verdict::output);
    assert!(
        copies.iter().all(|verdict| verdict.output() == first),
        "{copies:?}"
    );
    assert_eq!(world.counts(), [2, 2], "T2 reserved and captured once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory() {
    redeliveries_resume_after_the_last_checkpoint(Arc::new(MemoryStore::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis() {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let store = match idempotency_redis::RedisStore::connect(&url).await {
        Ok(store) => Some(store.with_key_prefix("test:steps-queue:")),
        Err(error) => idempotency_test::unavailable("Redis", error),
    };
    if let Some(store) = store {
        redeliveries_resume_after_the_last_checkpoint(store).await;
    }
}
