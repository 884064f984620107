//! SIGTERM mid-handler: the `payments` process stops accepting, answers the request it is
//! running, finishes the handler whose client left (detached), stores both outcomes, and only
//! then exits, with status 0. A restarted process replays both keys: neither runs again, and
//! neither is left in flight. Over Redis (the layer, its record stored after the handler) and
//! SQLite (transactional HTTP, the record committed with the order).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(
    not(any(feature = "redis", feature = "sqlite")),
    allow(dead_code, unused_imports)
)]

mod hardening_support;

use std::time::Duration;

use axum_payments::client::{Reply, post_json, send_once};
use hardening_support::{Payments, temp_path, unique};
use http::StatusCode;
use serde_json::json;

/// `POST /orders` with `key` on a connection of its own.
async fn order(addr: std::net::SocketAddr, key: &str) -> Reply {
    let body = json!({"user_id": 7, "amount_cents": 1299});
    send_once(addr, post_json("/orders", Some(key), &body).unwrap())
        .await
        .unwrap()
}

/// `payments` on `store`, its POST handlers pausing 1.5 s.
fn slow(store: &str, env: &[(&str, String)]) -> Payments {
    let mut slow = env.to_vec();
    slow.push(("HANDLER_DELAY_MS", "1500".to_owned()));
    Payments::start(store, &slow)
}

/// SIGTERM, and the exit status, which must be a success within the grace.
async fn terminated(service: Payments) {
    let stderr = service.stderr.clone();
    let status = service
        .terminate(Duration::from_secs(15))
        .await
        .expect("the process exits within its grace");
    let log = std::fs::read_to_string(&stderr).unwrap_or_default();
    assert!(status.success(), "exit {status:?}: {log}");
}

async fn sigterm_lets_running_work_finish(store: &str, env: Vec<(&str, String)>) {
    // A request in its handler when SIGTERM comes is answered, then the process exits.
    let service = slow(store, &env);
    let stays = unique("stays");
    let waiting = tokio::spawn({
        let (addr, key) = (service.addr, stays.clone());
        async move { order(addr, &key).await }
    });
    service.paused_handlers(1).await;
    terminated(service).await;
    let answered = waiting.await.unwrap();
    assert_eq!(answered.status, StatusCode::CREATED);

    // A handler whose client left is finished, and its outcome stored, before the exit.
    let service = slow(store, &env);
    let leaves = unique("leaves");
    let leaving = tokio::spawn({
        let (addr, key) = (service.addr, leaves.clone());
        async move { order(addr, &key).await }
    });
    service.paused_handlers(1).await;
    leaving.abort();
    tokio::time::sleep(Duration::from_millis(100)).await;
    terminated(service).await;

    // Both keys replay in the next process: neither runs again, neither is left in flight.
    let restarted = Payments::start(store, &env);
    let again = order(restarted.addr, &stays).await;
    assert!(again.is_replay(), "the answered order is replayed");
    assert_eq!(again.body, answered.body);
    let left = order(restarted.addr, &leaves).await;
    assert_eq!(
        left.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&left.body)
    );
    assert!(
        left.is_replay(),
        "the handler whose client left finished and stored its outcome before the exit"
    );
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_sigterm_lets_running_work_finish() {
    let url = hardening_support::redis_url();
    if hardening_support::reachable("Redis", &url) {
        sigterm_lets_running_work_finish("redis", vec![("REDIS_URL", url)]).await;
    }
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_sigterm_lets_running_work_finish() {
    let file = temp_path("shutdown", "db");
    let url = format!("sqlite://{}?mode=rwc", file.display());
    sigterm_lets_running_work_finish("sqlite", vec![("SQLITE_URL", url)]).await;
}
