//! The service over a SQL store: transactional HTTP. The two POST routes run their writes in
//! the request's own transaction, in which the layers claim the key and store the answer:
//! the record, the order and the coupon commit together or not at all.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::post;
use idempotency_sql::TxStore;
use idempotency_tower::transactional::{TransactionalService, Tx};
use tower::Layer;
use tower::util::MapResponse;

use super::handlers::{created, paid};
use super::layers::{callback_layer_builder, orders_layer_builder};
use super::model::{NewOrder, Order, PaymentCallback};
use super::problem::Problem;
use super::routes::{GuardedResponse, into_response, unguarded_routes};
use super::sql::SqlPayments;
use super::state::AppState;

/// The payments service as [`transactional_app`] builds it.
pub type TransactionalApp<S> = MapResponse<
    TransactionalService<TransactionalService<Router, S>, S>,
    fn(GuardedResponse) -> Response,
>;

/// What the transactional handlers share: the repository's writes on a transaction's
/// connection, and the rest of the state.
struct TxState<DB: sqlx::Database> {
    sql: Arc<dyn SqlPayments<DB>>,
    app: AppState,
}

impl<DB: sqlx::Database> Clone for TxState<DB> {
    fn clone(&self) -> Self {
        Self {
            sql: Arc::clone(&self.sql),
            app: self.app.clone(),
        }
    }
}

/// The payments service over a SQL `store`: the layers of [`app`](super::app), built
/// transactional, in front of handlers that write through `sql` in the request's transaction.
/// `store` and `sql` live in one database.
pub fn transactional_app<S, DB>(
    state: AppState,
    store: S,
    sql: Arc<dyn SqlPayments<DB>>,
) -> TransactionalApp<S>
where
    S: TxStore<Database = DB>,
    DB: sqlx::Database,
{
    let secret = state.callback_secret.clone();
    let callers = state.callers.clone();
    let background = state.background.clone();
    let router = Router::new()
        .route("/orders", post(create_order::<DB>))
        .route("/payments/callback", post(payment_callback::<DB>))
        .with_state(TxState {
            sql,
            app: state.clone(),
        })
        .merge(unguarded_routes(state));
    let orders = orders_layer_builder(store.clone(), callers)
        .tracker(background.clone())
        .build_transactional();
    let callback = callback_layer_builder(store, secret)
        .tracker(background)
        .build_transactional();
    MapResponse::new(
        orders.layer(callback.layer(router)),
        into_response as fn(GuardedResponse) -> Response,
    )
}

/// `POST /orders` in the request's transaction (201).
async fn create_order<DB: sqlx::Database>(
    State(state): State<TxState<DB>>,
    mut tx: Tx<DB>,
    body: Result<Json<NewOrder>, JsonRejection>,
) -> Result<(StatusCode, Json<Order>), Problem> {
    let Json(new) = body?;
    let order = state.sql.create_order_on(&mut tx, new).await?;
    state.app.pause().await;
    Ok(created(order))
}

/// `POST /payments/callback` in the request's transaction: the transition `WAIT_PAY → PAID`
/// and, when it applies, the coupon (200; 409 illegal, 404 unknown order, neither stored).
async fn payment_callback<DB: sqlx::Database>(
    State(state): State<TxState<DB>>,
    mut tx: Tx<DB>,
    body: Result<Json<PaymentCallback>, JsonRejection>,
) -> Result<Json<Order>, Problem> {
    let Json(callback) = body?;
    let transition = state
        .sql
        .pay_on(&mut tx, callback.order_id, &callback.trade_no)
        .await?;
    state.app.pause().await;
    paid(&callback, transition)
}
