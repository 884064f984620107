//! The routers: the protected service, the same service bare, and the incident.

use axum::Router;
use axum::routing::{MethodRouter, get, post};

use idempotency_core::Store;

use super::handlers::{cancel_order, create_order, get_order, payment_callback, user_coupons};
use super::layers::{callback_layer, orders_layer};
use super::naive::naive_payment_callback;
use super::state::AppState;

/// The service's routes with the given `POST /orders` and `POST /payments/callback` routes.
fn routes(
    state: AppState,
    orders: MethodRouter<AppState>,
    callback: MethodRouter<AppState>,
) -> Router {
    Router::new()
        .route("/orders", orders)
        .route("/orders/{order_id}", get(get_order))
        .route("/orders/{order_id}/cancel", post(cancel_order))
        .route("/payments/callback", callback)
        .route("/users/{user_id}/coupons", get(user_coupons))
        .with_state(state)
}

/// The payments service: [`bare`]'s handlers, with [`orders_layer`] in front of `POST /orders`
/// and [`callback_layer`] in front of `POST /payments/callback`, both over `store`.
///
/// Pass a [`BoxStore`](idempotency_core::BoxStore) for a store chosen at run time, or any
/// `Store + Clone` (an `Arc<MemoryStore>`, say).
pub fn app<S: Store + Clone>(state: AppState, store: S) -> Router {
    routes(
        state,
        post(create_order).layer(orders_layer(store.clone())),
        post(payment_callback).layer(callback_layer(store)),
    )
}

/// The service without any idempotency layer: the same handlers (the callback still goes
/// through the `WAIT_PAY → PAID` state machine). The load generator's baseline.
pub fn bare(state: AppState) -> Router {
    routes(state, post(create_order), post(payment_callback))
}

/// The incident: [`bare`], except that the callback is the seed's original handler, which grants
/// a coupon on every call ([`naive_payment_callback`]).
pub fn incident(state: AppState) -> Router {
    routes(state, post(create_order), post(naive_payment_callback))
}
