//! Runs with steps on every database (`DATABASE_URL`, `MYSQL_URL`, a SQLite file): a step
//! completed before never runs again, whether the run is retried, taken over after its owner
//! died, paused on a step that may succeed later, ended part-way (with its compensations) or
//! resumed by the completer.
#![cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use idempotency_core::{Fingerprint, IdempotencyKey, Outcome, Record, Scope, StorageKey};
use idempotency_steps::{CallError, Completer, Run, Runner, Start, Started, StepError};

/// A name no other test run uses.
fn unique(prefix: &str) -> String {
    let mut bytes = [0u8; 6];
    getrandom::fill(&mut bytes).unwrap();
    format!("{prefix}_{}", hex::encode(bytes))
}

/// Fails under `CI=true`, else prints why the suite is skipped.
fn unavailable(service: &str, reason: impl std::fmt::Display) {
    if std::env::var("CI").is_ok_and(|value| value == "true" || value == "1") {
        panic!("{service} is required in CI but unreachable: {reason}");
    }
    eprintln!("SKIPPED: {service} unreachable ({reason}); set CI=true to make this a failure");
}

/// How often each step's body ran, across every owner of one run.
#[derive(Default)]
struct Ran {
    reserve: AtomicUsize,
    capture: AtomicUsize,
    grant: AtomicUsize,
    unreserve: AtomicUsize,
    /// The downstream keys capture was called with.
    keys: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl Ran {
    fn downstream_keys(&self) -> usize {
        self.keys.lock().unwrap().len()
    }

    fn counts(&self) -> [usize; 4] {
        [
            self.reserve.load(Ordering::SeqCst),
            self.capture.load(Ordering::SeqCst),
            self.grant.load(Ordering::SeqCst),
            self.unreserve.load(Ordering::SeqCst),
        ]
    }
}

/// How the capture step behaves this attempt.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Provider {
    Captures,
    Declines,
    TimesOut,
}

/// One request of a test: its scope, key and input.
struct Request {
    scope: Scope,
    key: StorageKey,
    fingerprint: Fingerprint,
    input: Vec<u8>,
}

impl Request {
    fn new() -> Self {
        let scope = Scope::new(unique("checkout"));
        let key = scope.storage_key(&IdempotencyKey::parse(&unique("K")).unwrap());
        let input = br#"{"order_id":1}"#.to_vec();
        Self {
            scope,
            key,
            fingerprint: Fingerprint::of_bytes(&input),
            input,
        }
    }

    fn start(&self) -> Start<'_> {
        Start::new(
            &self.key,
            self.scope.namespace(),
            &self.fingerprint,
            self.input.clone(),
        )
    }
}

/// The store-specific half of the suite: one business table, the steps' SQL on it.
macro_rules! steps_suite {
    ($module:ident, $store:ty, $db:ty, $fresh:expr, $ph:literal, $holds_with_connection:expr) => {
        mod $module {
            use super::*;

            /// The lease of tests whose owner dies: SQLite notices a dead owner by its lease
            /// only.
            fn crash_lease() -> Duration {
                if $holds_with_connection {
                    Duration::from_secs(30)
                } else {
                    Duration::from_millis(300)
                }
            }

            /// A fresh record table and orders table; `None` when the database is unreachable.
            async fn fresh(lease: Duration) -> Option<(Runner<$store>, String)> {
                let store: $store = $fresh.await?;
                store.migrate().await.unwrap();
                let orders = format!("{}_orders", store.table_name());
                let pool = idempotency_sql::TxStore::pool(&store);
                sqlx::query(&format!(
                    "CREATE TABLE {orders} (id BIGINT PRIMARY KEY, reserved BIGINT NOT NULL, \
                     coupons BIGINT NOT NULL)"
                ))
                .execute(pool)
                .await
                .unwrap();
                sqlx::query(&format!("INSERT INTO {orders} VALUES (1, 0, 0)"))
                    .execute(pool)
                    .await
                    .unwrap();
                Some((Runner::new(store).with_lease(lease), orders))
            }

            /// The order's (reserved, coupons) as committed.
            async fn order(runner: &Runner<$store>, orders: &str) -> (i64, i64) {
                let pool = idempotency_sql::TxStore::pool(runner.store());
                sqlx::query_as(&format!(
                    "SELECT reserved, coupons FROM {orders} WHERE id = 1"
                ))
                .fetch_one(pool)
                .await
                .unwrap()
            }

            /// The checkout: reserve (local, undone by unreserve), capture (foreign), grant
            /// (local); `stop_after` leaves the run there, as a crash would.
            async fn checkout(
                run: &mut Run<$store>,
                orders: &str,
                ran: &Ran,
                provider: Provider,
                stop_after: Option<&str>,
            ) -> Result<Outcome, StepError> {
                let reserve = format!(
                    "UPDATE {orders} SET reserved = reserved + 1 WHERE id = {}",
                    $ph
                );
                let reserved: i64 = run
                    .local("reserve", async |tx| {
                        ran.reserve.fetch_add(1, Ordering::SeqCst);
                        sqlx::query(&reserve).bind(1_i64).execute(&mut **tx).await?;
                        Ok(1)
                    })
                    .await?;
                let unreserve = format!("UPDATE {orders} SET reserved = reserved - 1 WHERE id = 1");
                let ran_undo = Arc::new(AtomicUsize::new(0));
                let counted = Arc::clone(&ran_undo);
                run.undo(
                    "reserve",
                    Box::new(move |conn, _result| {
                        Box::pin(async move {
                            counted.fetch_add(1, Ordering::SeqCst);
                            sqlx::query(&unreserve).execute(conn).await?;
                            Ok(())
                        })
                    }),
                );
                match stop_after {
                    // Stopped after reserve's commit, as the drills' crash is.
                    Some("reserve") => {
                        run.commit().await?;
                        return Err(StepError::retry("stopped after reserve"));
                    }
                    // Stopped with reserve's transaction still open: it rolls back.
                    Some("reserve, open") => {
                        return Err(StepError::retry("stopped inside reserve"));
                    }
                    _ => {}
                }
                let capture: String = run
                    .foreign("capture", async |key| {
                        ran.capture.fetch_add(1, Ordering::SeqCst);
                        ran.keys.lock().unwrap().insert(key.to_owned());
                        match provider {
                            Provider::Captures => Ok(format!("cap-{}", &key[..8])),
                            Provider::Declines => Err(StepError::end("declined")),
                            Provider::TimesOut => Err(StepError::retry("provider timed out")),
                        }
                    })
                    .await
                    .inspect_err(|_| {
                        ran.unreserve
                            .fetch_add(ran_undo.load(Ordering::SeqCst), Ordering::SeqCst);
                    })?;
                match stop_after {
                    // Stopped after capture's checkpoint is written.
                    Some("capture") => {
                        run.commit().await?;
                        return Err(StepError::retry("stopped after capture"));
                    }
                    // Stopped before it (it is written with the next step's transaction).
                    Some("capture, unwritten") => {
                        return Err(StepError::retry("stopped before capture's checkpoint"));
                    }
                    _ => {}
                }
                let grant = format!("UPDATE {orders} SET coupons = coupons + 1 WHERE id = 1");
                let coupon: i64 = run
                    .local("grant", async |tx| {
                        ran.grant.fetch_add(1, Ordering::SeqCst);
                        sqlx::query(&grant).execute(&mut **tx).await?;
                        Ok(7)
                    })
                    .await?;
                Ok(Outcome::new(201, format!("{reserved}/{capture}/{coupon}")))
            }

            /// Starts `request`, waiting (on the event, bounded) while a previous owner's hold
            /// is still being dropped by the database.
            async fn start_when_free(
                runner: &Runner<$store>,
                request: &Request,
            ) -> Started<$store> {
                let deadline = Instant::now() + Duration::from_secs(20);
                loop {
                    let started = runner.start(request.start()).await.unwrap();
                    match started {
                        Started::InFlight(_) if Instant::now() < deadline => {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        other => return other,
                    }
                }
            }

            /// Runs `checkout` to its answer, storing it (compensations first when a step
            /// ended the run).
            async fn finish(
                mut run: Run<$store>,
                orders: &str,
                ran: &Ran,
                provider: Provider,
            ) -> Outcome {
                match checkout(&mut run, orders, ran, provider, None).await {
                    Ok(outcome) => {
                        run.complete(&outcome).await.unwrap();
                        outcome
                    }
                    Err(StepError::End(answer)) => {
                        let outcome = Outcome::new(402, answer.to_string());
                        run.complete(&outcome).await.unwrap();
                        outcome
                    }
                    Err(error) => panic!("the checkout failed: {error}"),
                }
            }

            #[tokio::test]
            async fn a_run_completes_once_and_replays() {
                let Some((runner, orders)) = fresh(Duration::from_secs(30)).await else {
                    return;
                };
                let (ran, request) = (Ran::default(), Request::new());
                let Started::Run(run) = runner.start(request.start()).await.unwrap() else {
                    panic!("a new key runs");
                };
                assert!(!run.resumed());
                let outcome = finish(run, &orders, &ran, Provider::Captures).await;
                assert_eq!(outcome.status, 201);
                match runner.start(request.start()).await.unwrap() {
                    Started::Replay(replayed) => assert_eq!(replayed, outcome),
                    other => panic!("a completed run replays, got {other:?}"),
                }
                assert_eq!(ran.counts(), [1, 1, 1, 0]);
                assert_eq!(order(&runner, &orders).await, (1, 1));
                let other = Fingerprint::of_bytes(b"another payload");
                let start = Start {
                    fingerprint: &other,
                    ..request.start()
                };
                assert!(matches!(
                    runner.start(start).await.unwrap(),
                    Started::Mismatch
                ));
            }

            #[tokio::test]
            async fn a_dead_owners_run_resumes_after_its_last_checkpoint() {
                let Some((runner, orders)) = fresh(crash_lease()).await else {
                    return;
                };
                // Where the owner stops, where the resume starts, and how often each step ran.
                let stops = [
                    ("reserve", Some("reserve"), [1, 1, 1, 0]),
                    ("capture", Some("capture"), [1, 1, 1, 0]),
                    // The step's transaction was open: it rolled back and runs again.
                    ("reserve, open", None, [2, 1, 1, 0]),
                    // The call is made again, with the same downstream key.
                    ("capture, unwritten", Some("reserve"), [1, 2, 1, 0]),
                ];
                for (stop, resumed_at, counts) in stops {
                    let (ran, request) = (Ran::default(), Request::new());
                    let Started::Run(mut run) = runner.start(request.start()).await.unwrap() else {
                        panic!("a new key runs");
                    };
                    let stopped =
                        checkout(&mut run, &orders, &ran, Provider::Captures, Some(stop)).await;
                    assert!(matches!(stopped, Err(StepError::Retry(_))));
                    // The owner dies: its connection (and with it its hold) is dropped.
                    drop(run);
                    let Started::Run(run) = start_when_free(&runner, &request).await else {
                        panic!("the run resumes");
                    };
                    assert_eq!(run.resumed(), resumed_at.is_some(), "after {stop}");
                    assert_eq!(run.progress().stopped_at(), resumed_at);
                    let outcome = finish(run, &orders, &ran, Provider::Captures).await;
                    assert_eq!(outcome.status, 201);
                    assert_eq!(ran.counts(), counts, "after {stop}");
                    assert_eq!(ran.downstream_keys(), 1, "after {stop}");
                }
                assert_eq!(order(&runner, &orders).await, (4, 4));
            }

            #[tokio::test]
            async fn a_live_owners_run_is_in_flight() {
                let Some((runner, orders)) = fresh(Duration::from_secs(30)).await else {
                    return;
                };
                let (ran, request) = (Ran::default(), Request::new());
                let Started::Run(run) = runner.start(request.start()).await.unwrap() else {
                    panic!("a new key runs");
                };
                assert!(matches!(
                    runner.start(request.start()).await.unwrap(),
                    Started::InFlight(_)
                ));
                let outcome = finish(run, &orders, &ran, Provider::Captures).await;
                match runner.start(request.start()).await.unwrap() {
                    Started::Replay(replayed) => assert_eq!(replayed, outcome),
                    other => panic!("a completed run replays, got {other:?}"),
                }
            }

            #[tokio::test]
            async fn an_ending_compensates_the_completed_steps_once() {
                let Some((runner, orders)) = fresh(crash_lease()).await else {
                    return;
                };
                // Ended, then the owner dies before the compensation: the resume compensates
                // without calling the provider again.
                let (ran, request) = (Ran::default(), Request::new());
                let Started::Run(mut run) = runner.start(request.start()).await.unwrap() else {
                    panic!("a new key runs");
                };
                let ended = checkout(&mut run, &orders, &ran, Provider::Declines, None).await;
                assert!(matches!(ended, Err(StepError::End(_))));
                assert_eq!(
                    order(&runner, &orders).await,
                    (1, 0),
                    "reserved, not compensated yet"
                );
                drop(run);
                let Started::Run(run) = start_when_free(&runner, &request).await else {
                    panic!("the run resumes");
                };
                assert_eq!(run.progress().stopped_at(), Some("capture"));
                let outcome = finish(run, &orders, &ran, Provider::Captures).await;
                assert_eq!(outcome.status, 402, "the ending answers, not a new capture");
                assert_eq!(ran.counts()[..3], [1, 1, 0]);
                assert_eq!(order(&runner, &orders).await, (0, 0), "reserve compensated");
                match runner.start(request.start()).await.unwrap() {
                    Started::Replay(replayed) => assert_eq!(replayed.status, 402),
                    other => panic!("an ended run replays its answer, got {other:?}"),
                }
                let record = runner.store_record(&request.key).await;
                let progress = record.progress.unwrap();
                assert!(progress.step("reserve").unwrap().compensated);
            }

            /// A paused run's checkpoints belong to its payload: the same key with another
            /// payload is a mismatch, not a takeover that would resume them; the run's own
            /// payload resumes them.
            #[tokio::test]
            async fn another_payload_never_resumes_a_runs_checkpoints() {
                let Some((runner, _orders)) = fresh(Duration::from_secs(30)).await else {
                    return;
                };
                let request = Request::new();
                let Started::Run(mut run) = runner.start(request.start()).await.unwrap() else {
                    panic!("a new key runs");
                };
                let one: i64 = run.foreign("capture", async |_key| Ok(1)).await.unwrap();
                run.pause().await;
                let other_input = br#"{"order_id":2}"#;
                let other = Fingerprint::of_bytes(other_input);
                let start = Start::new(
                    &request.key,
                    request.scope.namespace(),
                    &other,
                    &other_input[..],
                );
                assert!(matches!(
                    runner.start(start).await.unwrap(),
                    Started::Mismatch
                ));
                let Started::Run(run) = runner.start(request.start()).await.unwrap() else {
                    panic!("the run's own payload resumes it");
                };
                assert!(run.resumed());
                assert_eq!(run.progress().stopped_at(), Some("capture"));
                run.complete(&Outcome::new(201, one.to_string()))
                    .await
                    .unwrap();
            }

            #[tokio::test]
            async fn a_paused_run_resumes_at_once() {
                let Some((runner, orders)) = fresh(Duration::from_secs(30)).await else {
                    return;
                };
                let (ran, request) = (Ran::default(), Request::new());
                let Started::Run(mut run) = runner.start(request.start()).await.unwrap() else {
                    panic!("a new key runs");
                };
                let failed = checkout(&mut run, &orders, &ran, Provider::TimesOut, None).await;
                assert!(matches!(failed, Err(StepError::Retry(_))));
                run.pause().await;
                // Given back and its lease ended: the retry resumes now, on every database.
                let Started::Run(run) = runner.start(request.start()).await.unwrap() else {
                    panic!("a paused run resumes at once");
                };
                let outcome = finish(run, &orders, &ran, Provider::Captures).await;
                assert_eq!(outcome.status, 201);
                assert_eq!(
                    ran.counts(),
                    [1, 2, 1, 0],
                    "the capture is the one step again"
                );
                assert_eq!(order(&runner, &orders).await, (1, 1));
            }

            #[tokio::test]
            async fn a_function_call_runs_once_resumes_and_replays() {
                let Some((runner, orders)) = fresh(Duration::from_secs(30)).await else {
                    return;
                };
                let scope = Scope::new(unique("fn"));
                let key = IdempotencyKey::parse(&unique("K")).unwrap();
                let ran = Ran::default();
                let call = |stop: Option<&'static str>, provider: Provider| {
                    let (orders, ran) = (&orders, &ran);
                    async move |run: &mut Run<$store>, _input: serde_json::Value| {
                        let outcome = checkout(run, orders, ran, provider, stop).await?;
                        Ok(String::from_utf8(outcome.body.to_vec()).unwrap())
                    }
                };
                let input = serde_json::json!({"order_id": 1});
                // Stopped after the capture (a step asks to retry): resumable.
                let stopped = runner
                    .call(&scope, &key, input.clone(), call(Some("capture"), Provider::Captures))
                    .await;
                assert!(matches!(stopped, Err(CallError::Retry(_))), "{stopped:?}");
                // The next call resumes after the capture, then replays.
                let result: String = runner
                    .call(&scope, &key, input.clone(), call(None, Provider::Captures))
                    .await
                    .unwrap();
                assert_eq!(ran.counts(), [1, 1, 1, 0]);
                let again: String = runner
                    .call(&scope, &key, input.clone(), call(None, Provider::Captures))
                    .await
                    .unwrap();
                assert_eq!(again, result);
                assert_eq!(ran.counts(), [1, 1, 1, 0], "a replay runs nothing");
                assert_eq!(order(&runner, &orders).await, (1, 1));
                let other = runner
                    .call(&scope, &key, serde_json::json!({"order_id": 2}), call(None, Provider::Captures))
                    .await;
                assert!(matches!(other, Err(CallError::Mismatch)), "{other:?}");

                // An ending is stored: compensated once, then answered to every call.
                let declined_key = IdempotencyKey::parse(&unique("D")).unwrap();
                let ended = runner
                    .call(&scope, &declined_key, input.clone(), call(None, Provider::Declines))
                    .await;
                assert!(matches!(ended, Err(CallError::Ended(_))), "{ended:?}");
                let replayed = runner
                    .call(&scope, &declined_key, input.clone(), call(None, Provider::Captures))
                    .await;
                assert!(matches!(replayed, Err(CallError::Ended(_))), "{replayed:?}");
                assert_eq!(order(&runner, &orders).await, (1, 1), "the second reserve undone");

                // A stopped call nobody calls again: the completer resumes it with its input.
                let lonely = IdempotencyKey::parse(&unique("L")).unwrap();
                let stopped = runner
                    .call(&scope, &lonely, input.clone(), call(Some("reserve"), Provider::Captures))
                    .await;
                assert!(matches!(stopped, Err(CallError::Retry(_))));
                let completer = Completer::new(runner.store().clone(), scope.namespace());
                let finished = AtomicUsize::new(0);
                completer
                    .sweep(|record: Record| {
                        let (runner, finished) = (&runner, &finished);
                        let steps = call(None, Provider::Captures);
                        async move {
                            let result: Result<String, _> = runner.resume(&record, steps).await;
                            if result.is_ok() {
                                finished.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    })
                    .await
                    .unwrap();
                assert_eq!(finished.load(Ordering::SeqCst), 1);
                assert_eq!(order(&runner, &orders).await, (2, 2));
            }

            #[tokio::test]
            async fn the_completer_finishes_runs_nobody_retries() {
                let Some((runner, orders)) = fresh(crash_lease()).await else {
                    return;
                };
                let (ran, request) = (Ran::default(), Request::new());
                let Started::Run(mut run) = runner.start(request.start()).await.unwrap() else {
                    panic!("a new key runs");
                };
                let stopped =
                    checkout(&mut run, &orders, &ran, Provider::Captures, Some("capture")).await;
                assert!(stopped.is_err());
                drop(run);
                let completer = Completer::new(runner.store().clone(), request.scope.namespace());
                let deadline = Instant::now() + Duration::from_secs(20);
                loop {
                    let resumed = AtomicUsize::new(0);
                    completer
                        .sweep(|record: Record| {
                            let (runner, orders, ran, resumed) = (&runner, &orders, &ran, &resumed);
                            async move {
                                let input = record.progress.clone().unwrap().input;
                                let start = Start::new(
                                    &record.key,
                                    &record.namespace,
                                    &record.fingerprint,
                                    input,
                                );
                                if let Started::Run(run) = runner.start(start).await.unwrap() {
                                    finish(run, orders, ran, Provider::Captures).await;
                                    resumed.fetch_add(1, Ordering::SeqCst);
                                }
                            }
                        })
                        .await
                        .unwrap();
                    if resumed.load(Ordering::SeqCst) == 1 {
                        break;
                    }
                    assert!(
                        Instant::now() < deadline,
                        "the completer never resumed the run"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                assert_eq!(ran.counts(), [1, 1, 1, 0]);
                assert_eq!(order(&runner, &orders).await, (1, 1));
                match runner.start(request.start()).await.unwrap() {
                    Started::Replay(replayed) => assert_eq!(replayed.status, 201),
                    other => panic!("the completed run replays, got {other:?}"),
                }
            }
        }
    };
}

/// The record of `key`, read through the store.
trait StoreRecord {
    async fn store_record(&self, key: &StorageKey) -> Record;
}

impl<S: idempotency_sql::StepStore> StoreRecord for Runner<S> {
    async fn store_record(&self, key: &StorageKey) -> Record {
        idempotency_core::Store::get(self.store(), key)
            .await
            .unwrap()
            .unwrap()
    }
}

#[cfg(feature = "postgres")]
async fn postgres() -> Option<idempotency_sql::PostgresStore> {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    match sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .connect(&url)
        .await
    {
        Ok(pool) => Some(
            idempotency_sql::PostgresStore::new(pool)
                .with_table_name(&unique("steps"))
                .unwrap(),
        ),
        Err(error) => {
            unavailable("PostgreSQL", error);
            None
        }
    }
}

#[cfg(feature = "mysql")]
async fn mysql() -> Option<idempotency_sql::MySqlStore> {
    let url = std::env::var("MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned());
    match sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(8)
        .connect(&url)
        .await
    {
        Ok(pool) => Some(
            idempotency_sql::MySqlStore::new(pool)
                .with_table_name(&unique("steps"))
                .unwrap(),
        ),
        Err(error) => {
            unavailable("MySQL", error);
            None
        }
    }
}

#[cfg(feature = "sqlite")]
async fn sqlite() -> Option<idempotency_sql::SqliteStore> {
    let path = std::env::temp_dir().join(format!("{}.db", unique("steps")));
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(5));
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await
        .unwrap();
    Some(idempotency_sql::SqliteStore::new(pool))
}

#[cfg(feature = "postgres")]
steps_suite!(
    on_postgres,
    idempotency_sql::PostgresStore,
    sqlx::Postgres,
    postgres(),
    "$1",
    true
);
#[cfg(feature = "mysql")]
steps_suite!(
    on_mysql,
    idempotency_sql::MySqlStore,
    sqlx::MySql,
    mysql(),
    "?",
    true
);
#[cfg(feature = "sqlite")]
steps_suite!(
    on_sqlite,
    idempotency_sql::SqliteStore,
    sqlx::Sqlite,
    sqlite(),
    "?1",
    false
);

/// A completed run gives its hold back with its answer (one statement on PostgreSQL): another
/// session can take the key's advisory lock at once.
#[cfg(feature = "postgres")]
#[tokio::test]
async fn a_completed_run_gives_its_hold_back_on_postgres() {
    use sqlx::Connection;
    let Some(store) = postgres().await else {
        return;
    };
    store.migrate().await.unwrap();
    let runner = Runner::new(store);
    let request = Request::new();
    let Started::Run(mut run) = runner.start(request.start()).await.unwrap() else {
        panic!("a new key runs");
    };
    let one: i64 = run.foreign("capture", async |_key| Ok(1)).await.unwrap();
    run.complete(&Outcome::new(201, one.to_string()))
        .await
        .unwrap();
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let mut other = sqlx::PgConnection::connect(&url).await.unwrap();
    let lock = i64::from_be_bytes(request.key.0[..8].try_into().unwrap());
    let (taken,): (bool,) = sqlx::query_as("SELECT pg_try_advisory_lock($1)")
        .bind(lock)
        .fetch_one(&mut other)
        .await
        .unwrap();
    assert!(taken, "the completed run's hold was given back");
}

/// Duplicates that wait for a live owner are woken by the database when it gives its hold
/// back: one when the owner answers (it replays the answer), one when the owner dies (it takes
/// the run over after the last checkpoint). Neither polls: `start_waiting` asks the database
/// once and waits on the hold.
async fn waiters_are_woken_by_the_hold<S: idempotency_sql::StepStore>(
    runner: Runner<S>,
    waiting: impl AsyncFn() -> i64,
) {
    let runner = Arc::new(runner);
    for ending in ["answers", "dies"] {
        let request = Arc::new(Request::new());
        let Started::Run(mut run) = runner.start(request.start()).await.unwrap() else {
            panic!("a new key runs");
        };
        let one: i64 = run.foreign("capture", async |_key| Ok(1)).await.unwrap();
        run.commit().await.unwrap();
        let before = waiting().await;
        let waiter = tokio::spawn({
            let (runner, request) = (Arc::clone(&runner), Arc::clone(&request));
            async move {
                let started = runner.start_waiting(request.start(), Duration::from_secs(60));
                match started.await.unwrap() {
                    Started::Replay(outcome) => format!("replay {}", outcome.status),
                    Started::Run(run) => {
                        let resumed = run.progress().stopped_at().unwrap_or("").to_owned();
                        run.complete(&Outcome::new(201, "1")).await.unwrap();
                        format!("resumed after {resumed}")
                    }
                    Started::InFlight(after) => format!("in flight, retry after {after:?}"),
                    Started::Mismatch => "mismatch".to_owned(),
                }
            }
        });
        // The waiter is waiting on the hold inside the database.
        let deadline = Instant::now() + Duration::from_secs(30);
        while waiting().await <= before {
            assert!(
                Instant::now() < deadline,
                "the waiter never waited on the hold"
            );
            tokio::task::yield_now().await;
        }
        match ending {
            "answers" => run
                .complete(&Outcome::new(201, one.to_string()))
                .await
                .unwrap(),
            _ => drop(run),
        }
        // Well before the waiter's own bound (60 s): woken, not timed out.
        let answer = tokio::time::timeout(Duration::from_secs(20), waiter)
            .await
            .expect("woken by the hold")
            .unwrap();
        let expected = match ending {
            "answers" => "replay 201",
            _ => "resumed after capture",
        };
        assert_eq!(answer, expected, "the owner {ending}");
    }
    // A function's call waits the same way (`Runner::with_wait`), then returns the result.
    let request = Arc::new(Request::new());
    let Started::Run(run) = runner.start(request.start()).await.unwrap() else {
        panic!("a new key runs");
    };
    let before = waiting().await;
    let call = tokio::spawn({
        let request = Arc::clone(&request);
        let runner = (*runner).clone().with_wait(Duration::from_secs(60));
        async move {
            let ran = runner.run_once(request.start(), (), async |_run: &mut Run<S>, ()| {
                Ok::<i64, StepError>(2)
            });
            ran.await.map(|answer| (answer.value, answer.replayed))
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while waiting().await <= before {
        assert!(
            Instant::now() < deadline,
            "the call never waited on the hold"
        );
        tokio::task::yield_now().await;
    }
    run.complete(&Outcome::new(0, "1")).await.unwrap();
    let answered = tokio::time::timeout(Duration::from_secs(20), call)
        .await
        .expect("woken by the hold")
        .unwrap();
    assert!(
        matches!(answered, Ok((1, true))),
        "the owner's result, replayed"
    );
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn waiters_are_woken_by_the_hold_on_postgres() {
    let Some(store) = postgres().await else {
        return;
    };
    store.migrate().await.unwrap();
    let pool = idempotency_sql::TxStore::pool(&store).clone();
    let waiting = async || -> i64 {
        sqlx::query_scalar(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
        )
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    waiters_are_woken_by_the_hold(Runner::new(store), waiting).await;
}

#[cfg(feature = "mysql")]
#[tokio::test]
async fn waiters_are_woken_by_the_hold_on_mysql() {
    let Some(store) = mysql().await else {
        return;
    };
    store.migrate().await.unwrap();
    let pool = idempotency_sql::TxStore::pool(&store).clone();
    let waiting = async || -> i64 {
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM information_schema.processlist \
             WHERE info LIKE 'SELECT GET_LOCK(%' AND time >= 0 AND state LIKE '%lock%'",
        )
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    waiters_are_woken_by_the_hold(Runner::new(store), waiting).await;
}
