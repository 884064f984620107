//! The routers: the protected service (two compositions), the same service bare, and the
//! incident.

use std::convert::Infallible;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use axum::routing::{MethodRouter, get, post};
use idempotency_core::Store;
use idempotency_tower::{IdempotencyService, ResponseBody};
use tower::Layer;
use tower::util::MapResponse;
use tower_service::Service;

use super::handlers::{cancel_order, create_order, get_order, payment_callback, user_coupons};
use super::layers::{callback_layer_builder, orders_layer_builder};
use super::naive::naive_payment_callback;
use super::state::AppState;

/// An HTTP service that [`Server`](super::Server) and `axum::serve` can serve: a [`Router`],
/// an [`App`].
pub trait HttpService:
    Service<Request, Response = Response, Error = Infallible, Future: Send + 'static>
    + Clone
    + Send
    + Sync
    + 'static
{
}

impl<T> HttpService for T where
    T: Service<Request, Response = Response, Error = Infallible, Future: Send + 'static>
        + Clone
        + Send
        + Sync
        + 'static
{
}

/// The response of [`bare`]'s router after the two idempotency layers.
pub(crate) type GuardedResponse = Response<ResponseBody<ResponseBody<Body>>>;

/// The payments service as [`app`] builds it: [`bare`]'s router inside [`orders_layer`](super::layers::orders_layer) and
/// [`callback_layer`](super::layers::callback_layer), each guarding its own route.
pub type App<S> = MapResponse<
    IdempotencyService<IdempotencyService<Router, S>, S>,
    fn(GuardedResponse) -> Response,
>;

/// The service's routes with the given `POST /orders` and `POST /payments/callback` routes.
fn routes(
    state: AppState,
    orders: MethodRouter<AppState>,
    callback: MethodRouter<AppState>,
) -> Router {
    Router::new()
        .route("/orders", orders)
        .route("/payments/callback", callback)
        .with_state(state.clone())
        .merge(unguarded_routes(state))
}

/// The routes no idempotency layer guards: the reads, and the cancel transition (idempotent by
/// its state machine).
pub(crate) fn unguarded_routes(state: AppState) -> Router {
    Router::new()
        .route("/orders/{order_id}", get(get_order))
        .route("/orders/{order_id}/cancel", post(cancel_order))
        .route("/users/{user_id}/coupons", get(user_coupons))
        .with_state(state)
}

/// The payments service: [`bare`]'s handlers, with [`orders_layer`](super::layers::orders_layer) in front of `POST /orders`
/// and [`callback_layer`](super::layers::callback_layer) in front of `POST /payments/callback` (checking the gateway's
/// signature when the state has its secret), both over `store`. Over a SQL store, the
/// service is [`transactional_app`](super::transactional::transactional_app) instead.
///
/// The two layers wrap the whole router, and each guards only its own route
/// (`only_paths`): every request crosses both, and the router sees one request body type. It
/// answers as [`app_per_route`] does, with fewer allocations per request (axum boxes a
/// per-route layer's bodies and clones its route on every call; see `BENCHMARKS.md`).
///
/// Pass a [`BoxStore`](idempotency_core::BoxStore) for a store chosen at run time, or any
/// `Store + Clone` (an `Arc<MemoryStore>`, say).
///
/// ```
/// use std::sync::Arc;
/// use idempotency_core::MemoryStore;
/// use axum_payments::{App, AppState, app};
/// let service: App<Arc<MemoryStore>> = app(AppState::in_memory(), Arc::new(MemoryStore::new()));
/// # let _ = service;
/// ```
pub fn app<S: Store + Clone>(state: AppState, store: S) -> App<S> {
    let callback = callback_layer_builder(store.clone(), state.callback_secret.clone())
        .tracker(state.background.clone())
        .build();
    let orders = orders_layer_builder(store, state.callers.clone())
        .tracker(state.background.clone())
        .build();
    let guarded = orders.layer(callback.layer(bare(state)));
    MapResponse::new(guarded, into_response as fn(GuardedResponse) -> Response)
}

/// The guarded response, with axum's body.
pub(crate) fn into_response(response: GuardedResponse) -> Response {
    response.map(Body::new)
}

/// The same service as [`app`], with each layer on its route (`post(handler).layer(…)`), the
/// usual axum composition: a [`Router`] that more routes can be merged into.
pub fn app_per_route<S: Store + Clone>(state: AppState, store: S) -> Router {
    let orders = orders_layer_builder(store.clone(), state.callers.clone())
        .tracker(state.background.clone())
        .build();
    let callback = callback_layer_builder(store, state.callback_secret.clone())
        .tracker(state.background.clone())
        .build();
    routes(
        state,
        post(create_order).layer(orders),
        post(payment_callback).layer(callback),
    )
}

/// The service without any idempotency layer: the same handlers (the callback still goes
/// through the `WAIT_PAY → PAID` state machine). The load generator's baseline.
pub fn bare(state: AppState) -> Router {
    routes(state, post(create_order), post(payment_callback))
}

/// The incident: [`bare`], except that the callback is the incident's original handler, which grants
/// a coupon on every call ([`naive_payment_callback`]).
pub fn incident(state: AppState) -> Router {
    routes(state, post(create_order), post(naive_payment_callback))
}
