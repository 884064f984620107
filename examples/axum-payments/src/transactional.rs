//! The service over a SQL store: transactional HTTP. The two POST routes run their writes in
//! the request's own transaction, in which the layers claim the key and store the answer:
//! the record, the order and the coupon commit together or not at all. `POST /checkout` is a
//! run with steps ([`checkout`](super::checkout)), each step checkpointed on its record.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::post;
use idempotency_sql::StepStore;
use idempotency_tower::steps::{StepsLayer, StepsService};
use idempotency_tower::transactional::{TransactionalService, Tx};
use idempotency_tower::{IdempotencyLayer, ResponseBody};
use tower::Layer;
use tower::util::MapResponse;

use super::checkout::{CHECKOUT_NAMESPACE, CheckoutState, checkout};
use super::handlers::{created, paid};
use super::layers::{callback_layer_builder, orders_layer_builder};
use super::model::{NewOrder, Order, PaymentCallback};
use super::problem::Problem;
use super::routes::unguarded_routes;
use super::sql::SqlPayments;
use super::state::AppState;

/// The response of the three layers, before axum's body.
type LayeredResponse = Response<ResponseBody<ResponseBody<ResponseBody<axum::body::Body>>>>;

/// The payments service as [`transactional_app`] builds it.
pub type TransactionalApp<S> = MapResponse<
    TransactionalService<TransactionalService<StepsService<Router, S>, S>, S>,
    fn(LayeredResponse) -> Response,
>;

/// Where the checkout's provider is and where a drill crashes it.
#[derive(Clone, Debug)]
pub struct CheckoutConfig {
    /// The payment provider (`PROVIDER_ADDR`).
    pub provider: std::net::SocketAddr,
    /// The drill's crash point (`CRASH_AFTER`): exit right after this step's checkpoint.
    pub crash_after: Option<String>,
}

impl CheckoutConfig {
    /// `PROVIDER_ADDR` (default `127.0.0.1:3100`) and `CRASH_AFTER`.
    pub fn from_env() -> Result<Self, String> {
        let addr = super::provider::addr_from_env();
        let provider = addr
            .parse()
            .map_err(|error| format!("PROVIDER_ADDR={addr:?} is not an address: {error}"))?;
        let crash_after = std::env::var("CRASH_AFTER")
            .ok()
            .filter(|step| !step.is_empty());
        Ok(Self {
            provider,
            crash_after,
        })
    }
}

/// The steps layer of `POST /checkout`: keys scoped per caller, as `POST /orders`'s.
pub fn checkout_layer<S: StepStore>(store: S, callers: super::callers::Callers) -> StepsLayer<S> {
    IdempotencyLayer::builder(store)
        .principal(move |parts| callers.caller(&parts.headers))
        .namespace(CHECKOUT_NAMESPACE)
        .methods([http::Method::POST])
        .only_paths(["/checkout"])
        .build_steps()
}

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
    checkout_config: CheckoutConfig,
) -> TransactionalApp<S>
where
    S: StepStore<Database = DB> + Sync + 'static,
    DB: sqlx::Database,
{
    let secret = state.callback_secret.clone();
    let callers = state.callers.clone();
    let background = state.background.clone();
    let router = Router::new()
        .route("/orders", post(create_order::<DB>))
        .route("/payments/callback", post(payment_callback::<DB>))
        .with_state(TxState {
            sql: Arc::clone(&sql),
            app: state.clone(),
        })
        .merge(
            Router::new()
                .route("/checkout", post(checkout::<S>))
                .with_state(CheckoutState {
                    sql,
                    provider: checkout_config.provider,
                    crash_after: checkout_config.crash_after,
                }),
        )
        .merge(unguarded_routes(state));
    let steps = checkout_layer(store.clone(), callers.clone());
    let orders = orders_layer_builder(store.clone(), callers)
        .tracker(background.clone())
        .build_transactional();
    let callback = callback_layer_builder(store, secret)
        .tracker(background)
        .build_transactional();
    MapResponse::new(
        orders.layer(callback.layer(steps.layer(router))),
        into_response as fn(LayeredResponse) -> Response,
    )
}

/// The layered response, with axum's body.
fn into_response(response: LayeredResponse) -> Response {
    response.map(axum::body::Body::new)
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
