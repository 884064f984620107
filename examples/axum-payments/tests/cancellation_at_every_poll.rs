//! A client that goes away at any point of its request, on every backend: the request's future
//! is dropped after 0, 1, 2, … polls, until a request is left alone long enough to finish. After
//! each drop the client retries (again while it is told 409) with the same key. Wherever the
//! drop fell (before the claim, during it, before the handler, inside it, while the answer is
//! stored), the handler has run exactly once for that key when the retry is answered, and the
//! retry carries that one execution's answer: nothing is lost, left in flight or run twice.
//!
//! Then the same for a duplicate that waits for the first request (`wait_in_flight`): dropped
//! at each point of its wait, it never disturbs the first request, which completes and is
//! replayed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod hardening_support;

use std::collections::HashMap;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::response::Response;
use axum::routing::post;
use hardening_support::*;
use http_body_util::BodyExt;
use idempotency_core::Store;
use idempotency_tower::IdempotencyLayer;
use tower::ServiceExt;

/// Per key: how many times the handler started, and the serial of its first execution.
type Executions = Arc<Mutex<HashMap<String, (u32, u64)>>>;

static SERIAL: AtomicU64 = AtomicU64::new(1);

async fn pay(State(executions): State<Executions>, headers: HeaderMap) -> (StatusCode, String) {
    let key = headers["idempotency-key"].to_str().unwrap().to_owned();
    let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
    let first = {
        let mut executions = executions.lock().unwrap();
        let entry = executions.entry(key).or_insert((0, serial));
        entry.0 += 1;
        entry.1
    };
    // Three waits: the request can be dropped before, between and after them.
    tokio::time::sleep(Duration::from_millis(1)).await;
    tokio::task::yield_now().await;
    tokio::time::sleep(Duration::from_millis(1)).await;
    (StatusCode::CREATED, format!("{{\"execution\":{first}}}"))
}

fn payment(key: &str) -> Request<Body> {
    Request::post("/pay")
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(Body::from("{\"amount\":100}"))
        .unwrap()
}

async fn read(response: Response) -> (StatusCode, String) {
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

/// Polls `request` at most `polls` times, pausing between polls so that what it waits for can
/// happen; whether it finished.
async fn poll_at_most<F: Future + ?Sized>(mut request: Pin<&mut F>, polls: usize) -> bool {
    for _ in 0..polls {
        if poll_fn(|cx| Poll::Ready(request.as_mut().poll(cx)))
            .await
            .is_ready()
        {
            return true;
        }
        tokio::time::sleep(Duration::from_micros(300)).await;
    }
    false
}

/// The client's retry: the same request again while it is told 409 (the dropped request's work
/// still running), for at most 10 s.
async fn retry(app: &Router, key: &str) -> (StatusCode, String) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = read(app.clone().oneshot(payment(key)).await.unwrap()).await;
        if answer.0 != StatusCode::CONFLICT || Instant::now() > deadline {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The payment route behind a layer over `store`, waiting up to 5 s for a request in flight
/// if `wait`, else answering 409.
fn app<S: Store>(store: S, executions: &Executions, wait: bool) -> Router {
    let layer = IdempotencyLayer::builder(store)
        .shared_scope()
        .namespace("cancel")
        .lease(Duration::from_secs(30));
    let layer = if wait {
        layer.wait_in_flight(Duration::from_secs(5))
    } else {
        layer
    };
    Router::new()
        .route("/pay", post(pay))
        .with_state(executions.clone())
        .layer(layer.build())
}

async fn cancel_at_every_poll<S: Store>(backend: &str, store: S) {
    let store = Arc::new(store);
    let executions = Executions::default();
    let app = app(Arc::clone(&store), &executions, false);
    let run = unique("c");
    let (mut before_handler, mut inside_or_after) = (0, 0);
    for polls in 0.. {
        assert!(polls <= 500, "{backend}: a request never finished");
        let key = format!("{run}-{polls}");
        let mut first = Box::pin(app.clone().oneshot(payment(&key)));
        let finished = poll_at_most(first.as_mut(), polls).await;
        drop(first);
        match executions.lock().unwrap().get(&key) {
            None => before_handler += 1,
            Some(_) => inside_or_after += 1,
        }
        let (status, body) = retry(&app, &key).await;
        let execution = executions.lock().unwrap().get(&key).copied();
        let Some((runs, serial)) = execution else {
            panic!(
                "{backend}: dropped after {polls} polls, the handler never ran; the retry got {status} {body}"
            );
        };
        assert_eq!(
            runs, 1,
            "{backend}: dropped after {polls} polls, the handler ran {runs} times"
        );
        assert_eq!(
            (status, body),
            (StatusCode::CREATED, format!("{{\"execution\":{serial}}}")),
            "{backend}: dropped after {polls} polls, the retry did not get the one execution's answer"
        );
        if finished {
            break;
        }
    }
    // Both sides of the handler's start were reached, or the test proved less than it says.
    assert!(
        before_handler > 0 && inside_or_after > 1,
        "{backend}: {before_handler} drops before the handler, {inside_or_after} inside or after"
    );
    eprintln!(
        "{backend}: {} drop points, {before_handler} before the handler started, {inside_or_after} after",
        before_handler + inside_or_after
    );
    drop_waiters_at_every_poll(backend, store, &executions).await;
}

/// A duplicate that waits for the first request, dropped after each number of polls while the
/// first runs: the first completes, runs once, and is what the client's retry gets.
async fn drop_waiters_at_every_poll<S: Store>(
    backend: &str,
    store: Arc<S>,
    executions: &Executions,
) {
    let app = app(store, executions, true);
    let run = unique("w");
    let mut waiting = 0;
    for polls in 0.. {
        assert!(
            polls <= 500,
            "{backend}: a waiting duplicate never finished"
        );
        let key = format!("{run}-{polls}");
        let first = tokio::spawn(app.clone().oneshot(payment(&key)));
        while !executions.lock().unwrap().contains_key(&key) {
            tokio::time::sleep(Duration::from_micros(100)).await;
        }
        let mut waiter = Box::pin(app.clone().oneshot(payment(&key)));
        let finished = poll_at_most(waiter.as_mut(), polls).await;
        drop(waiter);
        if !finished {
            waiting += 1;
        }
        let first = read(first.await.unwrap().unwrap()).await;
        let retried = retry(&app, &key).await;
        let (runs, serial) = executions.lock().unwrap()[&key];
        let answer = (StatusCode::CREATED, format!("{{\"execution\":{serial}}}"));
        assert_eq!(
            runs, 1,
            "{backend}: waiter dropped after {polls} polls, the handler ran {runs} times"
        );
        assert_eq!(
            first, answer,
            "{backend}: waiter dropped after {polls} polls"
        );
        assert_eq!(
            retried, answer,
            "{backend}: waiter dropped after {polls} polls"
        );
        if finished {
            break;
        }
    }
    assert!(waiting > 1, "{backend}: only {waiting} drops while waiting");
    eprintln!("{backend}: {waiting} waiting duplicates dropped");
}

#[tokio::test(flavor = "multi_thread")]
async fn memory() {
    cancel_at_every_poll("memory", idempotency_core::MemoryStore::new()).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread")]
async fn redis() {
    if !reachable("Redis", &redis_url()) {
        return;
    }
    let store = idempotency_redis::RedisStore::connect(&redis_url())
        .await
        .unwrap()
        .with_key_prefix(format!("{}:", unique("cancel")));
    cancel_at_every_poll("redis", store).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread")]
async fn postgres() {
    let options = sqlx::postgres::PgPoolOptions::new().max_connections(4);
    if let Some((store, drop_table)) = postgres_store(options, "cancel").await {
        cancel_at_every_poll("postgres", store).await;
        drop_table().await;
    }
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread")]
async fn mysql() {
    let options = sqlx::mysql::MySqlPoolOptions::new().max_connections(4);
    if let Some((store, drop_table)) = mysql_store(options, "cancel").await {
        cancel_at_every_poll("mysql", store).await;
        drop_table().await;
    }
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread")]
async fn sqlite() {
    let options = sqlx::sqlite::SqlitePoolOptions::new().max_connections(4);
    let (store, remove) = sqlite_store(options, "cancel_sqlite").await;
    cancel_at_every_poll("sqlite", store).await;
    remove().await;
}
