//! The incident, reproduced: the original callback handler of the incident.
//!
//! It grants the coupon in the entry point, on every call, with no dedup and no state machine
//! guarding the grant ("callbacks surely won't repeat"). The gateway retried the same callback
//! six times and the user got six coupons. Only [`incident`](super::incident) mounts it.

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;

use super::model::{Order, PaymentCallback};
use super::problem::Problem;
use super::state::AppState;

/// `POST /payments/callback`, incident version: grant first, then mark the order paid, whatever
/// state it was in.
pub async fn naive_payment_callback(
    State(state): State<AppState>,
    body: Result<Json<PaymentCallback>, JsonRejection>,
) -> Result<Json<Order>, Problem> {
    let Json(callback) = body?;
    let order = state
        .repo
        .order(callback.order_id)
        .await?
        .ok_or_else(|| Problem::not_found(format!("no order {}", callback.order_id)))?;
    // The bug: a side effect in the entry point, before (and regardless of) any dedup.
    state.repo.grant_coupon(order.user_id).await?;
    // Then an unguarded status write: no `where status = 'WAIT_PAY'`, so nothing notices the
    // duplicate.
    let paid = state
        .repo
        .mark_paid_unchecked(order.order_id, &callback.trade_no)
        .await?
        .unwrap_or(order);
    Ok(Json(paid))
}
