//! The gateway's duplicate callbacks over real TCP: one coupon per payment, however many
//! callbacks and however concurrent.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum_payments::client::Reply;
use axum_payments::{AppState, OrderStatus, PaymentCallback, Server, app, gateway, incident};
use http::StatusCode;
use idempotency_core::{BoxStore, MemoryStore};

async fn protected() -> Server {
    Server::spawn(app(
        AppState::in_memory(),
        BoxStore::new(MemoryStore::new()),
    ))
    .await
    .unwrap()
}

/// Exactly one answer ran the handler; every other one is a replay of it (or, where the first
/// was still in flight, a 409 the gateway would retry).
fn assert_one_execution(replies: &[Reply]) {
    let fresh: Vec<_> = replies
        .iter()
        .filter(|r| r.status == StatusCode::OK && !r.is_replay())
        .collect();
    assert_eq!(fresh.len(), 1, "statuses: {}", gateway::tally(replies));
    for reply in replies {
        match reply.status {
            StatusCode::OK => assert_eq!(reply.body, fresh[0].body),
            StatusCode::CONFLICT => assert!(!reply.is_replay()),
            other => panic!("unexpected {other}: {}", gateway::tally(replies)),
        }
    }
}

async fn paid_once(server: &Server, user_id: u64, concurrent: usize, sequential: usize) {
    let addr = server.addr();
    let order = gateway::create_order(addr, user_id, 1299, &format!("o-{user_id}"))
        .await
        .unwrap();
    let callback = PaymentCallback {
        trade_no: format!("T-{user_id}"),
        order_id: order.order_id,
    };
    let mut replies = Vec::new();
    if sequential > 0 {
        replies.extend(
            gateway::deliver_sequentially(addr, &callback, sequential)
                .await
                .unwrap(),
        );
    }
    if concurrent > 0 {
        replies.extend(
            gateway::deliver_concurrently(addr, &callback, concurrent)
                .await
                .unwrap(),
        );
    }
    assert_one_execution(&replies);
    assert_eq!(gateway::coupons(addr, user_id).await.unwrap(), 1);
    let order = gateway::order(addr, order.order_id).await.unwrap();
    assert_eq!(order.status, OrderStatus::Paid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_sequential_callbacks_grant_one_coupon() {
    let server = protected().await;
    paid_once(&server, 7, 0, 6).await;
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_concurrent_callbacks_grant_one_coupon() {
    let server = protected().await;
    paid_once(&server, 8, 6, 0).await;
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_sequential_then_six_concurrent_callbacks_grant_one_coupon() {
    let server = protected().await;
    paid_once(&server, 9, 6, 6).await;
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_callbacks_grant_one_coupon() {
    let server = protected().await;
    paid_once(&server, 10, 200, 0).await;
    server.shutdown().await.unwrap();
}

/// The incident router really reproduces the incident's bug (so the demo's "6" is measured, not
/// printed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_incident_handler_grants_on_every_callback() {
    let server = Server::spawn(incident(AppState::in_memory()))
        .await
        .unwrap();
    let addr = server.addr();
    for (user_id, concurrent) in [(7, false), (8, true)] {
        let order = gateway::create_order(addr, user_id, 1299, "o")
            .await
            .unwrap();
        let callback = PaymentCallback {
            trade_no: format!("T-{user_id}"),
            order_id: order.order_id,
        };
        let replies = if concurrent {
            gateway::deliver_concurrently(addr, &callback, 6)
                .await
                .unwrap()
        } else {
            gateway::deliver_sequentially(addr, &callback, 6)
                .await
                .unwrap()
        };
        assert!(
            replies
                .iter()
                .all(|r| r.status == StatusCode::OK && !r.is_replay())
        );
        assert_eq!(gateway::coupons(addr, user_id).await.unwrap(), 6);
    }
    server.shutdown().await.unwrap();
}
