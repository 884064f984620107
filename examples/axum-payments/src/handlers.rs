//! The route handlers. They know nothing of idempotency keys: the layer in front of them does.
//! (With transactional HTTP, the two POST routes are `super::transactional`'s, which answer
//! as these do: [`created`] and [`paid`].)

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::StatusCode;

use super::model::{CouponCount, NewOrder, Order, OrderId, PaymentCallback, UserId};
use super::problem::Problem;
use super::repo::Transition;
use super::state::AppState;

/// `POST /orders`: creates an order in `WAIT_PAY` (201).
pub async fn create_order(
    State(state): State<AppState>,
    body: Result<Json<NewOrder>, JsonRejection>,
) -> Result<(StatusCode, Json<Order>), Problem> {
    let Json(new) = body?;
    let order = state.repo.create_order(new).await?;
    state.pause().await;
    Ok(created(order))
}

/// The answer to a created order: 201 and the order.
pub(crate) fn created(order: Order) -> (StatusCode, Json<Order>) {
    tracing::info!(
        order_id = order.order_id,
        user_id = order.user_id,
        "order created"
    );
    (StatusCode::CREATED, Json(order))
}

/// `POST /payments/callback`: the payment transition `WAIT_PAY → PAID`; the coupon is granted
/// by the transition itself, so only an applied transition grants.
///
/// Already `PAID` is an idempotent success (200, nothing granted); any other state is an
/// illegal transition (409, logged as an error: a real anomaly to alert on); an unknown order
/// is a 404.
pub async fn payment_callback(
    State(state): State<AppState>,
    body: Result<Json<PaymentCallback>, JsonRejection>,
) -> Result<Json<Order>, Problem> {
    let Json(callback) = body?;
    let transition = state
        .repo
        .pay(callback.order_id, &callback.trade_no)
        .await?;
    state.pause().await;
    paid(&callback, transition)
}

/// The answer to a payment callback, by what its transition found: 200 applied or already
/// `PAID`, 409 illegal, 404 unknown order.
pub(crate) fn paid(
    callback: &PaymentCallback,
    transition: Transition,
) -> Result<Json<Order>, Problem> {
    let order_id = callback.order_id;
    match transition {
        Transition::Applied(order) => {
            tracing::info!(order_id, trade_no = %callback.trade_no, user_id = order.user_id, "order paid, coupon granted");
            Ok(Json(order))
        }
        Transition::AlreadyInTarget(order) => {
            tracing::info!(order_id, trade_no = %callback.trade_no, "duplicate callback: order already PAID, nothing granted");
            Ok(Json(order))
        }
        Transition::Illegal(order) => {
            tracing::error!(order_id, trade_no = %callback.trade_no, status = order.status.as_str(), "illegal transition to PAID");
            Err(Problem::new(
                StatusCode::CONFLICT,
                "Illegal State Transition",
                format!(
                    "order {order_id} is {} and cannot become PAID",
                    order.status.as_str()
                ),
            ))
        }
        Transition::NotFound => Err(Problem::not_found(format!("no order {order_id}"))),
    }
}

/// `POST /orders/{order_id}/cancel`: the transition `WAIT_PAY → CANCELLED`.
pub async fn cancel_order(
    State(state): State<AppState>,
    path: Result<Path<OrderId>, PathRejection>,
) -> Result<Json<Order>, Problem> {
    let Path(order_id) = path?;
    match state.repo.cancel(order_id).await? {
        Transition::Applied(order) | Transition::AlreadyInTarget(order) => Ok(Json(order)),
        Transition::Illegal(order) => Err(Problem::new(
            StatusCode::CONFLICT,
            "Illegal State Transition",
            format!(
                "order {order_id} is {} and cannot be cancelled",
                order.status.as_str()
            ),
        )),
        Transition::NotFound => Err(Problem::not_found(format!("no order {order_id}"))),
    }
}

/// `GET /orders/{order_id}`.
pub async fn get_order(
    State(state): State<AppState>,
    path: Result<Path<OrderId>, PathRejection>,
) -> Result<Json<Order>, Problem> {
    let Path(order_id) = path?;
    state
        .repo
        .order(order_id)
        .await?
        .map(Json)
        .ok_or_else(|| Problem::not_found(format!("no order {order_id}")))
}

/// `GET /users/{user_id}/coupons`.
pub async fn user_coupons(
    State(state): State<AppState>,
    path: Result<Path<UserId>, PathRejection>,
) -> Result<Json<CouponCount>, Problem> {
    let Path(user_id) = path?;
    let count = state.repo.coupon_count(user_id).await?;
    Ok(Json(CouponCount { user_id, count }))
}
