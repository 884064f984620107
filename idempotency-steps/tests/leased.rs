//! Leased runs (steps on a core store: the memory store, Redis at `REDIS_URL`, default
//! `redis://127.0.0.1:6379`, and the Redis Cluster of `idempotency_test::redis_cluster`): a
//! step whose checkpoint landed never runs again, a step cut off before its checkpoint runs
//! again with the same downstream key, a dead owner's run is taken over when its lease ends
//! and the stalled owner is fenced out, a step longer than the lease keeps its run (the
//! heartbeat), a duplicate waits for the live run, an ending compensates, a retry pauses and
//! resumes, another payload is refused, and the completer resumes a run nobody retries.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use idempotency_core::{
    Error, Fingerprint, IdempotencyKey, Outcome, RecordState, Scope, StorageKey, Store,
};
use idempotency_operations::Operations;
use idempotency_steps::leased::{Abandoned, Run, Runner, Started};
use idempotency_steps::{CallError, Completer, Start, StepError};
use serde_json::json;

/// A lease short enough that a test waits for its end.
const SHORT: Duration = Duration::from_millis(200);
/// How long a retry waits for a live owner: far beyond [`SHORT`].
const WAIT: Duration = Duration::from_secs(10);

/// A name no other test run uses.
fn unique(prefix: &str) -> String {
    let mut bytes = [0u8; 6];
    getrandom::fill(&mut bytes).unwrap();
    format!("{prefix}_{}", hex::encode(bytes))
}

/// A fresh scope and key.
fn fresh() -> (Scope, IdempotencyKey) {
    let scope = Scope::new(unique("leased"));
    (scope, IdempotencyKey::parse(&unique("k")).unwrap())
}

/// Waits until the record of `key` shows its lease ended (read by `get`, not by a timer).
async fn until_lease_ended<S: Store>(store: &S, key: &StorageKey) {
    loop {
        let record = store.get(key).await.unwrap().expect("the run's record");
        if record.state == RecordState::InProgress && record.expires_at <= SystemTime::now() {
            return;
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// What each step did, across every owner of one run.
#[derive(Default)]
struct Ran {
    reserve: AtomicUsize,
    capture: AtomicUsize,
    /// The downstream keys each call and compensation was sent with, in order.
    keys: Mutex<Vec<String>>,
}

impl Ran {
    fn called(&self, step: &AtomicUsize, key: &str) {
        step.fetch_add(1, Ordering::SeqCst);
        self.keys.lock().unwrap().push(key.to_owned());
    }

    fn counts(&self) -> [usize; 2] {
        [
            self.reserve.load(Ordering::SeqCst),
            self.capture.load(Ordering::SeqCst),
        ]
    }

    fn keys(&self) -> Vec<String> {
        self.keys.lock().unwrap().clone()
    }
}

/// Two foreign steps, then the answer.
async fn checkout<S: Store>(run: &mut Run<S>, ran: &Ran, order: u32) -> Result<String, StepError> {
    let reserved: u32 = run
        .foreign("reserve", async |key| {
            ran.called(&ran.reserve, key);
            Ok(order)
        })
        .await?;
    let captured: String = run
        .foreign("capture", async |key| {
            ran.called(&ran.capture, key);
            Ok(format!("captured {reserved}"))
        })
        .await?;
    Ok(captured)
}

async fn completes_then_replays<S: Store + Operations>(store: Arc<S>) {
    let runner = Runner::new(store);
    let (scope, key) = fresh();
    let ran = Ran::default();
    let first: String = runner
        .call(&scope, &key, 7u32, async |run, order| {
            checkout(run, &ran, order).await
        })
        .await
        .unwrap();
    assert_eq!(first, "captured 7");
    let again: String = runner
        .call(&scope, &key, 7u32, async |run, order| {
            checkout(run, &ran, order).await
        })
        .await
        .unwrap();
    assert_eq!(again, first);
    assert_eq!(ran.counts(), [1, 1], "a replay runs nothing");
    let storage = scope.storage_key_for(idempotency_core::Mechanism::Function, key.as_str());
    let record = runner.store().get(&storage).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Completed);
    assert_eq!(record.progress, None);
}

async fn a_crash_after_a_checkpoint_resumes_after_it<S: Store + Operations>(store: Arc<S>) {
    let runner = Runner::new(store).with_lease(SHORT).with_wait(WAIT);
    let (scope, key) = fresh();
    let storage = scope.storage_key(&key);
    let fingerprint = Fingerprint::of_bytes(b"order 7");
    let start = || Start::new(&storage, scope.namespace(), &fingerprint, &b"7"[..]);
    let ran = Ran::default();
    let Started::Run(mut run) = runner.start(start()).await.unwrap() else {
        panic!("a new key is run");
    };
    let reserved: u32 = run
        .foreign("reserve", async |key| {
            ran.called(&ran.reserve, key);
            Ok(7)
        })
        .await
        .unwrap();
    assert_eq!(reserved, 7);
    drop(run); // the owner dies after the checkpoint of "reserve"

    // The retry waits for the dead owner's lease, takes the run over and resumes after it.
    let answer = runner
        .run_once(start(), 7u32, async |run, order| {
            assert!(run.resumed());
            checkout(run, &ran, order).await
        })
        .await
        .unwrap();
    assert!(!answer.replayed);
    assert_eq!(answer.value, "captured 7");
    assert_eq!(ran.counts(), [1, 1], "reserve never runs again");
    let record = runner.store().get(&storage).await.unwrap().unwrap();
    assert_eq!((record.state, record.attempts), (RecordState::Completed, 2));
}

async fn a_crash_inside_a_step_calls_it_again_with_the_same_key<S: Store + Operations>(
    store: Arc<S>,
) {
    let runner = Runner::new(store).with_lease(SHORT).with_wait(WAIT);
    let (scope, key) = fresh();
    let ran = Arc::new(Ran::default());
    let (called, mut calling) = tokio::sync::mpsc::unbounded_channel();
    let owner = {
        let (runner, scope, key, ran) = (runner.clone(), scope.clone(), key.clone(), ran.clone());
        tokio::spawn(async move {
            runner
                .call(&scope, &key, 7u32, async |run, _| {
                    run.foreign("capture", async |key| {
                        ran.called(&ran.capture, key);
                        called.send(()).unwrap();
                        std::future::pending::<Result<String, StepError>>().await
                    })
                    .await
                })
                .await
        })
    };
    calling.recv().await.unwrap();
    owner.abort(); // the owner dies inside the step, before its checkpoint
    assert!(owner.await.unwrap_err().is_cancelled());

    let receipt: String = runner
        .call(&scope, &key, 7u32, async |run, order| {
            checkout(run, &ran, order).await
        })
        .await
        .unwrap();
    assert_eq!(receipt, "captured 7");
    assert_eq!(ran.counts(), [1, 2], "capture is called again");
    let keys = ran.keys();
    assert_eq!(keys.len(), 3);
    assert_eq!(keys[0], keys[2], "with the same downstream key");
}

async fn a_stalled_owner_taken_over_is_fenced_out<S: Store + Operations>(store: Arc<S>) {
    let runner = Runner::new(store).with_lease(SHORT);
    let (scope, key) = fresh();
    let storage = scope.storage_key(&key);
    let fingerprint = Fingerprint::of_bytes(b"order 7");
    let start = || Start::new(&storage, scope.namespace(), &fingerprint, &b"7"[..]);
    let Started::Run(mut stalled) = runner.start(start()).await.unwrap() else {
        panic!("a new key is run");
    };
    assert!(matches!(
        runner.start(start()).await.unwrap(),
        Started::InFlight(_)
    ));
    until_lease_ended(runner.store(), &storage).await;
    let Started::Run(mut taker) = runner.start_waiting(start(), WAIT).await.unwrap() else {
        panic!("an ended lease is taken over");
    };
    let late = stalled
        .foreign("reserve", async |_| Ok::<_, StepError>(1u32))
        .await;
    assert!(
        matches!(late, Err(StepError::Store(Error::LeaseLost))),
        "the stalled owner's checkpoint is fenced out: {late:?}"
    );
    let reserved: u32 = taker.foreign("reserve", async |_| Ok(2)).await.unwrap();
    assert_eq!(reserved, 2, "the stalled owner's result was not kept");
    let outcome = Outcome::new(200, "done");
    assert!(matches!(
        stalled.complete(&outcome).await,
        Err(StepError::Store(Error::LeaseLost))
    ));
    taker.complete(&outcome).await.unwrap();
    assert!(matches!(
        runner.start(start()).await.unwrap(),
        Started::Replay(replayed) if replayed == outcome
    ));
}

async fn a_step_longer_than_the_lease_keeps_its_run<S: Store + Operations>(store: Arc<S>) {
    let runner = Runner::new(store).with_lease(SHORT);
    let (scope, key) = fresh();
    let storage = scope.storage_key(&key);
    let fingerprint = Fingerprint::of_bytes(b"order 7");
    let start = || Start::new(&storage, scope.namespace(), &fingerprint, &b"7"[..]);
    let Started::Run(mut run) = runner.start(start()).await.unwrap() else {
        panic!("a new key is run");
    };
    let claimed = runner.store().get(&storage).await.unwrap().unwrap();
    let (finish, finished) = tokio::sync::oneshot::channel::<()>();
    let owner = tokio::spawn(async move {
        let captured: u32 = run
            .foreign("capture", async |_| {
                finished.await.unwrap();
                Ok(1)
            })
            .await
            .unwrap();
        run.complete(&Outcome::new(200, captured.to_string()))
            .await
            .unwrap();
    });
    // The heartbeat renews the lease while the step runs: wait until a renewal came after the
    // claim's lease would have ended.
    let renewed = async {
        loop {
            let record = runner.store().get(&storage).await.unwrap().unwrap();
            if record.updated_at >= claimed.expires_at {
                return record;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let renewed = tokio::time::timeout(WAIT, renewed)
        .await
        .expect("the heartbeat renews the lease");
    assert_eq!(renewed.state, RecordState::InProgress);
    assert!(
        matches!(runner.start(start()).await.unwrap(), Started::InFlight(_)),
        "a live owner's run is not taken over"
    );
    finish.send(()).unwrap();
    owner.await.unwrap();
    assert!(matches!(
        runner.start(start()).await.unwrap(),
        Started::Replay(outcome) if outcome.body == "1"
    ));
}

async fn a_duplicate_waits_for_the_live_run<S: Store + Operations>(store: Arc<S>) {
    let runner = Runner::new(store);
    let (scope, key) = fresh();
    let storage = scope.storage_key(&key);
    let fingerprint = Fingerprint::of_bytes(b"order 7");
    let start = || Start::new(&storage, scope.namespace(), &fingerprint, &b"7"[..]);
    let Started::Run(mut run) = runner.start(start()).await.unwrap() else {
        panic!("a new key is run");
    };
    // Without a wait, and with one that runs out first: in flight.
    let impatient = runner.clone().with_wait(Duration::from_millis(50));
    let refused = impatient
        .run_once(
            start(),
            7u32,
            async |_, _: u32| -> Result<String, StepError> {
                unreachable!("a live owner's run is not run twice")
            },
        )
        .await;
    assert!(
        matches!(refused, Err(CallError::InFlight(_))),
        "{refused:?}"
    );

    // A duplicate that waits long enough gets the owner's answer, running nothing.
    let patient = runner.clone().with_wait(WAIT);
    let namespace = scope.namespace().to_owned();
    let duplicate = tokio::spawn(async move {
        let start = Start::new(&storage, &namespace, &fingerprint, &b"7"[..]);
        patient
            .run_once(
                start,
                7u32,
                async |_, _: u32| -> Result<String, StepError> {
                    unreachable!("a live owner's run is not run twice")
                },
            )
            .await
    });
    let captured: String = run
        .foreign("capture", async |_| Ok("captured 7".to_owned()))
        .await
        .unwrap();
    let body = serde_json::to_vec(&captured).unwrap();
    // The answer as a call stores it (status 0: returned), so the duplicate's call decodes it.
    run.complete(&Outcome::new(0, body)).await.unwrap();
    let answer = duplicate.await.unwrap().unwrap();
    assert!(answer.replayed);
    assert_eq!(answer.value, "captured 7");
}

async fn an_ending_compensates_last_step_first<S: Store + Operations>(store: Arc<S>) {
    let runner = Runner::new(store);
    let (scope, key) = fresh();
    let undone = Arc::new(Mutex::new(Vec::new()));
    let steps = async |run: &mut Run<_>, _: u32| -> Result<String, StepError> {
        for step in ["reserve", "charge"] {
            let _: String = run.foreign(step, async |key| Ok(key.to_owned())).await?;
            let undone = Arc::clone(&undone);
            run.undo(
                step,
                Box::new(move |key, result| {
                    Box::pin(async move {
                        undone.lock().unwrap().push((key, result));
                        Ok(())
                    })
                }),
            );
        }
        run.foreign("ship", async |_| {
            Err::<String, _>(StepError::end(json!({"declined": true})))
        })
        .await
    };
    let ended = runner.call(&scope, &key, 1u32, steps).await;
    assert!(
        matches!(ended, Err(CallError::Ended(ref answer)) if *answer == json!({"declined": true}))
    );
    let storage = scope.storage_key_for(idempotency_core::Mechanism::Function, key.as_str());
    let undone = undone.lock().unwrap().clone();
    let names: Vec<String> = undone.iter().map(|(key, _)| key.clone()).collect();
    assert_eq!(
        names,
        [
            storage.downstream("charge:undo"),
            storage.downstream("reserve:undo")
        ]
    );
    assert_eq!(undone[0].1, json!(storage.downstream("charge")));
    // The ending is the stored answer: nothing runs again.
    let again = runner
        .call(
            &scope,
            &key,
            1u32,
            async |_: &mut Run<_>, _: u32| -> Result<String, StepError> {
                unreachable!("ended before")
            },
        )
        .await;
    assert!(matches!(again, Err(CallError::Ended(_))));
}

async fn a_retry_pauses_and_a_call_resumes<S: Store + Operations>(store: Arc<S>) {
    let runner = Runner::new(store);
    let (scope, key) = fresh();
    let ran = Ran::default();
    let paused = runner
        .call(
            &scope,
            &key,
            7u32,
            async |run, _| -> Result<String, StepError> {
                run.foreign("reserve", async |key| {
                    ran.called(&ran.reserve, key);
                    Ok(7u32)
                })
                .await?;
                run.foreign("capture", async |_| {
                    Err(StepError::retry("the provider answered 503"))
                })
                .await
            },
        )
        .await;
    assert!(matches!(paused, Err(CallError::Retry(_))));
    let storage = scope.storage_key_for(idempotency_core::Mechanism::Function, key.as_str());
    let record = runner.store().get(&storage).await.unwrap().unwrap();
    assert_eq!(record.progress.unwrap().stopped_at(), Some("reserve"));
    assert!(
        record.expires_at <= SystemTime::now(),
        "a paused run's lease ended"
    );

    // Resumable at once, by the next call: reserve is not called again.
    let receipt: String = runner
        .call(&scope, &key, 7u32, async |run, order| {
            checkout(run, &ran, order).await
        })
        .await
        .unwrap();
    assert_eq!(receipt, "captured 7");
    assert_eq!(ran.counts(), [1, 1]);
}

async fn another_payload_is_a_mismatch<S: Store + Operations>(store: Arc<S>) {
    let runner = Runner::new(store);
    let (scope, key) = fresh();
    let retry = async |run: &mut Run<_>, _: u32| -> Result<String, StepError> {
        run.foreign("reserve", async |_| Ok(1u32)).await?;
        Err(StepError::retry("later"))
    };
    let paused = runner.call(&scope, &key, 1u32, retry).await;
    assert!(matches!(paused, Err(CallError::Retry(_))));
    let other = runner
        .call(
            &scope,
            &key,
            2u32,
            async |_: &mut Run<_>, _: u32| -> Result<String, StepError> {
                unreachable!("another payload never runs")
            },
        )
        .await;
    assert!(
        matches!(other, Err(CallError::Mismatch)),
        "paused: {other:?}"
    );

    // In progress under a live owner: another payload is refused too.
    let storage = scope.storage_key(&key);
    let (a, b) = (Fingerprint::of_bytes(b"a"), Fingerprint::of_bytes(b"b"));
    let Started::Run(_owner) = runner
        .start(Start::new(&storage, scope.namespace(), &a, &b"a"[..]))
        .await
        .unwrap()
    else {
        panic!("a new key is run");
    };
    assert!(matches!(
        runner
            .start(Start::new(&storage, scope.namespace(), &b, &b"b"[..]))
            .await
            .unwrap(),
        Started::Mismatch
    ));
}

async fn the_completer_resumes_an_abandoned_run<S: Store + Operations>(store: Arc<S>) {
    let runner = Runner::new(Arc::clone(&store));
    let (scope, key) = fresh();
    let ran = Ran::default();
    let paused = runner
        .call(
            &scope,
            &key,
            7u32,
            async |run, _| -> Result<String, StepError> {
                run.foreign("reserve", async |key| {
                    ran.called(&ran.reserve, key);
                    Ok(7u32)
                })
                .await?;
                Err(StepError::retry("no client retries this one"))
            },
        )
        .await;
    assert!(matches!(paused, Err(CallError::Retry(_))));

    let completer = Completer::new(Abandoned::new(store), scope.namespace());
    let receipts = Mutex::new(Vec::new());
    let sweep = completer
        .sweep(async |record| {
            let receipt: Result<String, _> = runner
                .resume(&record, async |run, order: u32| {
                    checkout(run, &ran, order).await
                })
                .await;
            receipts.lock().unwrap().push(receipt.unwrap());
        })
        .await
        .unwrap();
    assert_eq!(sweep.resumed, 1);
    assert_eq!(*receipts.lock().unwrap(), ["captured 7"]);
    assert_eq!(ran.counts(), [1, 1]);
    // Completed: the next sweep finds nothing, the client's retry gets the answer.
    assert_eq!(completer.sweep(async |_| {}).await.unwrap().resumed, 0);
    let replay: String = runner
        .call(
            &scope,
            &key,
            7u32,
            async |_: &mut Run<_>, _: u32| -> Result<String, StepError> {
                unreachable!("completed by the completer")
            },
        )
        .await
        .unwrap();
    assert_eq!(replay, "captured 7");
}

/// One test per check and store.
macro_rules! leased_tests {
    ($store:ident, $make:expr; $($check:ident),*) => {
        mod $store {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    if let Some(store) = $make.await {
                        super::$check(Arc::new(store)).await;
                    }
                }
            )*
        }
    };
}

macro_rules! every_check {
    ($store:ident, $make:expr) => {
        leased_tests!($store, $make;
            completes_then_replays, a_crash_after_a_checkpoint_resumes_after_it,
            a_crash_inside_a_step_calls_it_again_with_the_same_key,
            a_stalled_owner_taken_over_is_fenced_out, a_step_longer_than_the_lease_keeps_its_run,
            a_duplicate_waits_for_the_live_run,
            an_ending_compensates_last_step_first,
            a_retry_pauses_and_a_call_resumes, another_payload_is_a_mismatch,
            the_completer_resumes_an_abandoned_run);
    };
}

every_check!(memory, async { Some(idempotency_core::MemoryStore::new()) });

every_check!(redis, async {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    match idempotency_redis::RedisStore::connect(&url).await {
        Ok(store) => Some(store.with_key_prefix("test:steps:")),
        Err(error) => idempotency_test::unavailable("Redis", error),
    }
});

every_check!(cluster, async {
    match idempotency_test::redis_cluster(idempotency_redis::connect_cluster).await {
        Ok(connection) => {
            Some(idempotency_redis::RedisStore::new(connection).with_key_prefix("test:steps:"))
        }
        Err(error) => idempotency_test::unavailable("Redis Cluster", error),
    }
});
