//! Crash drills of `POST /checkout` (issue 38, retry to completion), black-box against the real
//! `payments` and `provider` binaries, on PostgreSQL (orders survive the restart).
//!
//! - For each step (`reserve`, `capture`, `grant`): the service exits by itself right after the
//!   step's checkpoint commits (`CRASH_AFTER`), the client gets no answer; the restarted service
//!   (its completer sweeping once at startup, then hourly) resumes the run on the identical
//!   request: 201, the same capture id again replayed, exactly one capture at the provider, one
//!   coupon. (Should the startup sweep resume it first, the retry waits out its 409s.)
//! - No client retry: the restarted service's completer (`COMPLETER_INTERVAL_MS=200`) finishes
//!   the checkout by itself; the identical request then replays it.
//! - A declined card: 402, the reservation undone (the order is `WAIT_PAY` again), and the
//!   identical request answers the same 402, replayed.
//!
//! Each drill runs in a PostgreSQL schema of its own (`search_path` in `DATABASE_URL`), so one
//! drill's completer never resumes another's runs. Unreachable PostgreSQL skips with a printed
//! reason, or fails under `CI=true`.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(feature = "postgres")]

mod hardening_support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum_payments::client::{ClientError, Reply, get, post_json, send_once};
use axum_payments::gateway;
use hardening_support::{Payments, Provider, unique};
use http::StatusCode;
use serde_json::{Value, json};

/// How long a drill waits for an event (a process's exit, the completer's work) before failing.
const BOUND: Duration = Duration::from_secs(30);

/// A completer interval long enough that, after its sweep at startup, only the client's retry
/// resumes a run.
const NO_COMPLETER_MS: &str = "3600000";

/// A user id no earlier run used: orders and coupons stay in the database across runs, and a
/// user of its own makes the user's coupons this order's coupons.
/// One drill at a time: every service a drill starts shares the database, and its completer
/// resumes any checkout left part-way, another drill's too (which would then capture at that
/// service's provider, not the drill's own).
static DRILLS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn fresh_user() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    u64::try_from(nanos % 1_000_000_000_000).unwrap() + u64::from(std::process::id())
}

/// A schema of its own in the PostgreSQL database, for one drill: its services' tables (records,
/// orders, coupons) live there, so no other drill's completer finds (and resumes, with its own
/// provider and its own `CRASH_AFTER`) this drill's runs, nor this drill's another's.
struct Schema {
    /// `DATABASE_URL` with the schema first on the `search_path`.
    url: String,
    name: String,
    pool: sqlx::PgPool,
}

impl Schema {
    /// A fresh schema, or `None` where PostgreSQL is unreachable (a skip with a printed reason,
    /// or a failure under `CI=true`).
    async fn create() -> Option<Self> {
        let base = hardening_support::postgres_url();
        if !hardening_support::reachable("PostgreSQL", &base) {
            return None;
        }
        let pool = sqlx::PgPool::connect(&base).await.unwrap();
        let name = unique("drill");
        sqlx::query(&format!("CREATE SCHEMA \"{name}\""))
            .execute(&pool)
            .await
            .unwrap();
        let separator = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{separator}options=-c%20search_path%3D{name}");
        Some(Self { url, name, pool })
    }

    /// Drops the schema and everything in it (a failed drill leaves it, to be looked at).
    async fn drop(self) {
        sqlx::query(&format!("DROP SCHEMA \"{}\" CASCADE", self.name))
            .execute(&self.pool)
            .await
            .unwrap();
        self.pool.close().await;
    }
}

/// The payments service's settings: PostgreSQL, the provider at `provider`, and `extra`.
fn payments_env(
    database: &str,
    provider: SocketAddr,
    extra: &[(&'static str, &str)],
) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("DATABASE_URL", database.to_owned()),
        ("PROVIDER_ADDR", provider.to_string()),
    ];
    env.extend(
        extra
            .iter()
            .map(|(name, value)| (*name, (*value).to_owned())),
    );
    env
}

/// `POST /checkout` for `order_id` with `key` (and the demo caller's bearer token, as
/// `POST /orders`), on a connection of its own.
async fn checkout(addr: SocketAddr, key: &str, order_id: u64) -> Result<Reply, ClientError> {
    let body = json!({"order_id": order_id});
    send_once(addr, post_json("/checkout", Some(key), &body)?).await
}

fn text(reply: &Reply) -> String {
    format!(
        "{} {:?}: {}",
        reply.status,
        reply.headers,
        String::from_utf8_lossy(&reply.body)
    )
}

/// The identical request, repeated (bounded) while it answers 409 (the run is held elsewhere,
/// e.g. by the completer); the first other answer.
async fn checkout_until_answered(addr: SocketAddr, key: &str, order_id: u64) -> Reply {
    let deadline = Instant::now() + BOUND;
    loop {
        let reply = checkout(addr, key, order_id).await.unwrap();
        if reply.status != StatusCode::CONFLICT {
            return reply;
        }
        assert!(
            Instant::now() < deadline,
            "still 409 after {BOUND:?}: {}",
            text(&reply)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The 201 body of a checkout: `{"order_id", "capture_id", "coupon_id"}`; checks its shape.
fn completed(reply: &Reply, order_id: u64) -> Value {
    assert_eq!(reply.status, StatusCode::CREATED, "{}", text(reply));
    let body: Value = reply.json().unwrap();
    assert_eq!(body["order_id"], json!(order_id), "{body}");
    let capture_id = body["capture_id"].as_str().unwrap_or_default();
    assert!(capture_id.starts_with("cap_"), "{body}");
    assert!(
        body["coupon_id"].is_i64() || body["coupon_id"].is_u64(),
        "{body}"
    );
    body
}

/// The order's status, as `GET /orders/{order_id}` answers it (text: the checkout adds states).
async fn order_status(addr: SocketAddr, order_id: u64) -> String {
    let reply = send_once(addr, get(&format!("/orders/{order_id}")).unwrap())
        .await
        .unwrap();
    assert_eq!(reply.status, StatusCode::OK, "{}", text(&reply));
    let order: Value = reply.json().unwrap();
    order["status"].as_str().unwrap().to_owned()
}

/// Starts a service with `CRASH_AFTER=step`, creates an order, sends the checkout, and waits for
/// the process to exit: the request gets no answer. The order's id and user.
async fn crash_after(step: &str, database: &str, provider: &Provider, key: &str) -> (u64, u64) {
    let env = payments_env(
        database,
        provider.addr,
        &[
            ("CRASH_AFTER", step),
            ("COMPLETER_INTERVAL_MS", NO_COMPLETER_MS),
        ],
    );
    let crashing = Payments::start("postgres", &env);
    let user = fresh_user();
    let order = gateway::create_order(crashing.addr, user, 1299, &unique("order"))
        .await
        .unwrap();
    let stderr = crashing.stderr.clone();
    let answered = checkout(crashing.addr, key, order.order_id).await;
    assert!(
        answered.is_err(),
        "CRASH_AFTER={step}: the service answered instead of exiting: {}",
        answered.map(|reply| text(&reply)).unwrap_or_default()
    );
    let status = crashing.exited(BOUND).await;
    assert!(
        status.is_some(),
        "CRASH_AFTER={step}: still running {BOUND:?} after the request: {}",
        std::fs::read_to_string(&stderr).unwrap_or_default()
    );
    (order.order_id, user)
}

/// Crash after `step`, restart without `CRASH_AFTER` (and a completer too slow to matter), send
/// the identical request: the run resumes and completes once.
async fn crash_after_step_then_retry(step: &str) {
    let _one_at_a_time = DRILLS.lock().await;
    let Some(schema) = Schema::create().await else {
        return;
    };
    let database = schema.url.clone();
    let provider = Provider::start(&[]);
    let key = unique(&format!("checkout_{step}"));
    let (order_id, user) = crash_after(step, &database, &provider, &key).await;

    // What the crash left: every step up to `step` is done, none after it started.
    let captured_before = provider.captures(order_id).await.captures;
    let expected_before = if step == "reserve" { 0 } else { 1 };
    assert_eq!(
        captured_before, expected_before,
        "CRASH_AFTER={step}: captures at the provider before the retry"
    );

    let restarted = Payments::start(
        "postgres",
        &payments_env(
            &database,
            provider.addr,
            &[("COMPLETER_INTERVAL_MS", NO_COMPLETER_MS)],
        ),
    );
    let coupons_before = gateway::coupons(restarted.addr, user).await.unwrap();
    assert_eq!(
        coupons_before,
        u64::from(step == "grant"),
        "CRASH_AFTER={step}: coupons before the retry"
    );

    let retry = checkout_until_answered(restarted.addr, &key, order_id).await;
    let body = completed(&retry, order_id);
    let again = checkout(restarted.addr, &key, order_id).await.unwrap();
    assert_eq!(again.status, StatusCode::CREATED, "{}", text(&again));
    assert!(again.is_replay(), "{}", text(&again));
    assert_eq!(again.json::<Value>().unwrap(), body, "the same checkout");

    let captures = provider.captures(order_id).await;
    assert_eq!(
        captures.captures,
        1,
        "CRASH_AFTER={step}: exactly one capture at the provider: {}",
        provider.stderr_text()
    );
    assert_eq!(
        captures.capture_ids,
        vec![body["capture_id"].as_str().unwrap().to_owned()],
        "the checkout's capture is the provider's"
    );
    assert_eq!(
        gateway::coupons(restarted.addr, user).await.unwrap(),
        1,
        "CRASH_AFTER={step}: one coupon: {}",
        restarted.stderr_text()
    );
    schema.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_reserve_then_retry() {
    crash_after_step_then_retry("reserve").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_capture_then_retry() {
    crash_after_step_then_retry("capture").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_grant_then_retry() {
    crash_after_step_then_retry("grant").await;
}

/// No client retry: the completer of the restarted service finishes the abandoned checkout
/// within the bound, and the identical request then replays it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_completer_finishes_without_a_retry() {
    let _one_at_a_time = DRILLS.lock().await;
    let Some(schema) = Schema::create().await else {
        return;
    };
    let database = schema.url.clone();
    let provider = Provider::start(&[]);
    let key = unique("checkout_completer");
    let (order_id, user) = crash_after("capture", &database, &provider, &key).await;
    assert_eq!(provider.captures(order_id).await.captures, 1);

    let restarted = Payments::start(
        "postgres",
        &payments_env(
            &database,
            provider.addr,
            &[("COMPLETER_INTERVAL_MS", "200")],
        ),
    );
    let started = Instant::now();
    loop {
        if gateway::coupons(restarted.addr, user).await.unwrap() == 1 {
            break;
        }
        assert!(
            started.elapsed() < BOUND,
            "the completer did not grant the coupon within {BOUND:?}: {}",
            restarted.stderr_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "the completer finished the checkout {:?} after the restart",
        started.elapsed()
    );

    // The coupon may be granted a moment before the run's record completes: a 409 then.
    let replay = checkout_until_answered(restarted.addr, &key, order_id).await;
    let body = completed(&replay, order_id);
    assert!(
        replay.is_replay(),
        "the completer finished it, the request only replays: {}",
        text(&replay)
    );
    let again = checkout(restarted.addr, &key, order_id).await.unwrap();
    assert!(again.is_replay(), "{}", text(&again));
    assert_eq!(again.json::<Value>().unwrap(), body);

    let captures = provider.captures(order_id).await;
    assert_eq!(captures.captures, 1, "{}", provider.stderr_text());
    assert_eq!(
        captures.capture_ids,
        vec![body["capture_id"].as_str().unwrap().to_owned()]
    );
    assert_eq!(gateway::coupons(restarted.addr, user).await.unwrap(), 1);
    schema.drop().await;
}

/// A declined card: 402, the reservation undone, and the same 402 replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declined_card_undoes_the_reservation() {
    let _one_at_a_time = DRILLS.lock().await;
    let Some(schema) = Schema::create().await else {
        return;
    };
    let database = schema.url.clone();
    // The order first (its id is the provider's declined order), on a service of its own.
    let user = fresh_user();
    let order = {
        let nobody = Provider::start(&[]);
        let plain = Payments::start("postgres", &payments_env(&database, nobody.addr, &[]));
        gateway::create_order(plain.addr, user, 1299, &unique("order"))
            .await
            .unwrap()
    };
    let order_id = order.order_id;
    let provider = Provider::start(&[("PROVIDER_DECLINE_ORDER", order_id.to_string())]);
    let service = Payments::start(
        "postgres",
        &payments_env(
            &database,
            provider.addr,
            &[("COMPLETER_INTERVAL_MS", NO_COMPLETER_MS)],
        ),
    );
    assert_eq!(order_status(service.addr, order_id).await, "WAIT_PAY");

    let key = unique("checkout_declined");
    let declined = checkout_until_answered(service.addr, &key, order_id).await;
    assert_eq!(
        declined.status,
        StatusCode::PAYMENT_REQUIRED,
        "{}",
        text(&declined)
    );
    assert_eq!(
        declined.content_type(),
        Some("application/problem+json"),
        "{}",
        text(&declined)
    );
    assert_eq!(
        order_status(service.addr, order_id).await,
        "WAIT_PAY",
        "the reservation is undone"
    );

    let again = checkout(service.addr, &key, order_id).await.unwrap();
    assert_eq!(
        again.status,
        StatusCode::PAYMENT_REQUIRED,
        "{}",
        text(&again)
    );
    assert!(again.is_replay(), "{}", text(&again));
    assert_eq!(again.body, declined.body, "the same 402");

    assert_eq!(provider.captures(order_id).await.captures, 0);
    assert_eq!(gateway::coupons(service.addr, user).await.unwrap(), 0);
    assert_eq!(order_status(service.addr, order_id).await, "WAIT_PAY");
    schema.drop().await;
}

/// Twenty identical checkouts at once on one service: one runs (one capture at the provider, one
/// coupon); the others wait in memory for it and replay its answer, or are told it is in flight
/// (409), never a second run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_duplicates_run_one_checkout() {
    let _one_at_a_time = DRILLS.lock().await;
    let Some(schema) = Schema::create().await else {
        return;
    };
    let database = schema.url.clone();
    let provider = Provider::start(&[]);
    let service = Payments::start(
        "postgres",
        &payments_env(
            &database,
            provider.addr,
            &[("COMPLETER_INTERVAL_MS", NO_COMPLETER_MS)],
        ),
    );
    let user = fresh_user();
    let order = gateway::create_order(service.addr, user, 1299, &unique("order"))
        .await
        .unwrap();
    let key = unique("checkout_storm");
    let storm: Vec<_> = (0..20)
        .map(|_| {
            let key = key.clone();
            let addr = service.addr;
            let order_id = order.order_id;
            tokio::spawn(async move { checkout(addr, &key, order_id).await })
        })
        .collect();
    let mut replies = Vec::new();
    for copy in storm {
        replies.push(copy.await.unwrap());
    }
    let mut first = None;
    for reply in replies {
        let reply = reply.unwrap();
        match reply.status {
            StatusCode::CREATED => {
                let body = completed(&reply, order.order_id);
                match &first {
                    None => first = Some(body),
                    Some(first) => assert_eq!(&body, first, "{}", text(&reply)),
                }
            }
            StatusCode::CONFLICT => {}
            _ => panic!("a duplicate answered {}", text(&reply)),
        }
    }
    assert!(first.is_some(), "one checkout ran");
    assert_eq!(provider.captures(order.order_id).await.captures, 1);
    assert_eq!(gateway::coupons(service.addr, user).await.unwrap(), 1);
    drop(service);
    schema.drop().await;
}
