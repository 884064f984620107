//! The payment gateway's side: create an order, deliver the same callback many times (one
//! after the other, or all at once), count the user's coupons. Over real TCP.

use std::net::SocketAddr;
use std::sync::Arc;

use http::StatusCode;
use serde_json::json;
use tokio::sync::Barrier;

use super::client::{ClientError, Connection, Reply, get, post_json, send_once};
use super::model::{CouponCount, Order, PaymentCallback, UserId};

/// `POST /orders` for `user_id` with `Idempotency-Key: key`; expects 201.
pub async fn create_order(
    addr: SocketAddr,
    user_id: UserId,
    amount_cents: u64,
    key: &str,
) -> Result<Order, ClientError> {
    let body = json!({"user_id": user_id, "amount_cents": amount_cents});
    let reply = send_once(addr, post_json("/orders", Some(key), &body)?).await?;
    Ok(reply.expect_status(StatusCode::CREATED)?.json()?)
}

/// Sends `callback` `times` times on one keep-alive connection, each after the previous answer.
pub async fn deliver_sequentially(
    addr: SocketAddr,
    callback: &PaymentCallback,
    times: usize,
) -> Result<Vec<Reply>, ClientError> {
    let body = serde_json::to_value(callback)?;
    let mut connection = Connection::open(addr).await?;
    let mut replies = Vec::with_capacity(times);
    for _ in 0..times {
        replies.push(
            connection
                .send(post_json("/payments/callback", None, &body)?)
                .await?,
        );
    }
    Ok(replies)
}

/// Sends `callback` `times` times at once: every connection is opened first, then all requests
/// are released together.
pub async fn deliver_concurrently(
    addr: SocketAddr,
    callback: &PaymentCallback,
    times: usize,
) -> Result<Vec<Reply>, ClientError> {
    let body = serde_json::to_value(callback)?;
    let start = Arc::new(Barrier::new(times));
    let mut tasks = Vec::with_capacity(times);
    for _ in 0..times {
        let start = Arc::clone(&start);
        let request = post_json("/payments/callback", None, &body)?;
        let mut connection = Connection::open(addr).await?;
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            connection.send(request).await
        }));
    }
    let mut replies = Vec::with_capacity(times);
    for task in tasks {
        replies.push(task.await??);
    }
    Ok(replies)
}

/// `GET /users/{user_id}/coupons`.
pub async fn coupons(addr: SocketAddr, user_id: UserId) -> Result<u64, ClientError> {
    let reply = send_once(addr, get(&format!("/users/{user_id}/coupons"))?).await?;
    let count: CouponCount = reply.expect_status(StatusCode::OK)?.json()?;
    Ok(count.count)
}

/// `GET /orders/{order_id}`.
pub async fn order(addr: SocketAddr, order_id: u64) -> Result<Order, ClientError> {
    let reply = send_once(addr, get(&format!("/orders/{order_id}"))?).await?;
    Ok(reply.expect_status(StatusCode::OK)?.json()?)
}

/// A one-line tally of replies: `200×1, 200 replayed×5`.
pub fn tally(replies: &[Reply]) -> String {
    let mut counts: Vec<(u16, bool, usize)> = Vec::new();
    for reply in replies {
        let entry = (reply.status.as_u16(), reply.is_replay());
        match counts.iter_mut().find(|(s, r, _)| (*s, *r) == entry) {
            Some((_, _, n)) => *n += 1,
            None => counts.push((entry.0, entry.1, 1)),
        }
    }
    counts.sort();
    counts
        .iter()
        .map(|(status, replayed, n)| {
            if *replayed {
                format!("{status} replayed×{n}")
            } else {
                format!("{status}×{n}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}
