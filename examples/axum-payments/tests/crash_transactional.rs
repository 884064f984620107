//! Transactional HTTP across real process deaths, on PostgreSQL, MySQL/MariaDB and SQLite: the
//! `payments` binary itself, its callback paused inside the business transaction
//! (`HANDLER_DELAY_MS`), is killed (SIGKILL) after it granted the coupon and before it
//! committed. The database rolls the transaction back, record and coupon together; the
//! restarted service runs the gateway's identical retry at once (no 409, no lease to wait
//! for), and the user holds exactly one coupon. Then three processes share the database and a
//! storm of 1000 duplicate callbacks spread over them grants one coupon.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod hardening_support;

use std::net::SocketAddr;
use std::sync::Arc;

use axum_payments::PaymentCallback;
use axum_payments::client::{Connection, Reply, post_json};
use axum_payments::gateway;
use hardening_support::{Payments, temp_path, unique};
use http::StatusCode;

/// A user id no earlier run used: the SQL repositories keep orders and coupons across runs.
fn fresh_user() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    u64::try_from(nanos % 1_000_000_000_000).unwrap() + u64::from(std::process::id())
}

/// One callback, on a connection of its own.
async fn callback(addr: SocketAddr, callback: &PaymentCallback) -> Result<Reply, String> {
    let body = serde_json::to_value(callback).unwrap();
    let mut connection = Connection::open(addr).await.map_err(|e| e.to_string())?;
    connection
        .send(post_json("/payments/callback", None, &body).unwrap())
        .await
        .map_err(|e| e.to_string())
}

/// Killed inside the business transaction, after the coupon's insert: nothing stays, and the
/// restarted service runs the identical retry at once.
async fn killed_before_commit_runs_again_at_once(store: &str, env: Vec<(&str, String)>) {
    let user = fresh_user();
    let plain = Payments::start(store, &env);
    let order = gateway::create_order(plain.addr, user, 1299, &unique("order"))
        .await
        .unwrap();
    drop(plain);

    let mut slow_env = env.clone();
    slow_env.push(("HANDLER_DELAY_MS", "3000".to_owned()));
    let slow = Payments::start(store, &slow_env);
    let paid = PaymentCallback {
        trade_no: unique("T"),
        order_id: order.order_id,
    };
    let in_flight = tokio::spawn({
        let (addr, paid) = (slow.addr, paid.clone());
        async move { callback(addr, &paid).await }
    });
    // Inside the pause: the coupon is written, the transaction open.
    slow.paused_handlers(1).await;
    slow.kill();
    assert!(
        in_flight.await.unwrap().is_err(),
        "the killed process cannot have answered"
    );

    let restarted = Payments::start(store, &env);
    let retry = callback(restarted.addr, &paid).await.unwrap();
    assert_eq!(
        retry.status,
        StatusCode::OK,
        "the retry runs at once: {}",
        String::from_utf8_lossy(&retry.body)
    );
    assert!(!retry.is_replay(), "nothing of the killed run stayed");
    let again = callback(restarted.addr, &paid).await.unwrap();
    assert_eq!(again.status, StatusCode::OK);
    assert!(again.is_replay());
    assert_eq!(gateway::coupons(restarted.addr, user).await.unwrap(), 1);
}

/// Three processes on one database, 1000 duplicate callbacks spread over them at once: one
/// coupon, and every answer is the first one's (200) or its replay.
async fn storm_across_three_processes(store: &str, env: Vec<(&str, String)>) {
    let user = fresh_user();
    let services: Vec<Payments> = (0..3).map(|_| Payments::start(store, &env)).collect();
    let order = gateway::create_order(services[0].addr, user, 1299, &unique("order"))
        .await
        .unwrap();
    let paid = PaymentCallback {
        trade_no: unique("T"),
        order_id: order.order_id,
    };
    let addrs: Vec<SocketAddr> = services.iter().map(|service| service.addr).collect();
    let limit = Arc::new(tokio::sync::Semaphore::new(96));
    let tasks: Vec<_> = (0..1000)
        .map(|index| {
            let (addr, paid, limit) = (addrs[index % 3], paid.clone(), Arc::clone(&limit));
            tokio::spawn(async move {
                let _permit = limit.acquire().await.unwrap();
                callback(addr, &paid).await
            })
        })
        .collect();
    let mut replies = Vec::with_capacity(tasks.len());
    for task in tasks {
        replies.push(task.await.unwrap().unwrap());
    }
    let fresh = replies
        .iter()
        .filter(|reply| reply.status == StatusCode::OK && !reply.is_replay())
        .count();
    assert_eq!(fresh, 1, "{}", gateway::tally(&replies));
    assert!(
        replies.iter().all(|reply| reply.status == StatusCode::OK),
        "{}",
        gateway::tally(&replies)
    );
    for addr in addrs {
        assert_eq!(gateway::coupons(addr, user).await.unwrap(), 1);
    }
}

#[cfg(feature = "postgres")]
fn postgres() -> Option<Vec<(&'static str, String)>> {
    let url = hardening_support::postgres_url();
    hardening_support::reachable("PostgreSQL", &url).then(|| vec![("DATABASE_URL", url)])
}

#[cfg(feature = "mysql")]
fn mysql() -> Option<Vec<(&'static str, String)>> {
    let url = hardening_support::mysql_url();
    hardening_support::reachable("MySQL", &url).then(|| vec![("MYSQL_URL", url)])
}

/// A SQLite file of its own, shared by the processes of one test.
#[cfg(feature = "sqlite")]
fn sqlite() -> Vec<(&'static str, String)> {
    let file = temp_path("payments", "db");
    vec![(
        "SQLITE_URL",
        format!("sqlite://{}?mode=rwc", file.display()),
    )]
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_killed_before_commit() {
    if let Some(env) = postgres() {
        killed_before_commit_runs_again_at_once("postgres", env).await;
    }
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_storm_across_three_processes() {
    if let Some(env) = postgres() {
        storm_across_three_processes("postgres", env).await;
    }
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_killed_before_commit() {
    if let Some(env) = mysql() {
        killed_before_commit_runs_again_at_once("mysql", env).await;
    }
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_storm_across_three_processes() {
    if let Some(env) = mysql() {
        storm_across_three_processes("mysql", env).await;
    }
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_killed_before_commit() {
    killed_before_commit_runs_again_at_once("sqlite", sqlite()).await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_storm_across_three_processes() {
    storm_across_three_processes("sqlite", sqlite()).await;
}
