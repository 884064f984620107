//! The Payments service on PostgreSQL, transactional: the layer claims each call's key in the
//! call's own transaction, the handler writes in it ([`Tx`]), and the layer stores the answer
//! (message, metadata, `grpc-status`) in the same transaction and commits.

use std::sync::Arc;
use std::time::Duration;

use idempotency_sql::{PostgresStore, validate_identifier};
use idempotency_steps::StepError;
use idempotency_tower::IdempotencyLayer;
use idempotency_tower::steps::{Steps, StepsLayer};
use idempotency_tower::transactional::{TransactionalLayer, Tx};
use sqlx::Postgres;
use tokio::net::TcpListener;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};

use super::proto::payments_server::{Payments, PaymentsServer};
use super::proto::{
    CallbackAck, CheckoutAck, CheckoutRequest, CreateOrderRequest, Order, PaymentCallbackRequest,
    WatchOrdersRequest,
};
use super::server::{CHECKOUT, CREATE_ORDER, PAYMENT_CALLBACK};

/// `PaymentCallback` answers `UNAVAILABLE` (after its write, which then rolls back) for trade
/// numbers that start with this: how a test makes a handler fail.
pub const FAILING_TRADE: &str = "fail-";

/// The Payments service writing orders and coupons to PostgreSQL in each call's transaction.
#[derive(Clone, Debug)]
pub struct LedgerService {
    orders: Arc<str>,
    coupons: Arc<str>,
    checkouts: Arc<str>,
    callback_delay: Duration,
}

impl LedgerService {
    /// A service on the tables `{prefix}orders` and `{prefix}coupons` (created by
    /// [`migrate`](Self::migrate)).
    pub fn new(prefix: &str) -> Result<Self, idempotency_core::Error> {
        let (orders, coupons) = (format!("{prefix}orders"), format!("{prefix}coupons"));
        let checkouts = format!("{prefix}checkouts");
        validate_identifier(&orders)?;
        validate_identifier(&coupons)?;
        validate_identifier(&checkouts)?;
        Ok(Self {
            orders: orders.into(),
            coupons: coupons.into(),
            checkouts: checkouts.into(),
            callback_delay: Duration::ZERO,
        })
    }

    /// Makes `PaymentCallback` pause after its write, before it answers.
    pub fn with_callback_delay(mut self, delay: Duration) -> Self {
        self.callback_delay = delay;
        self
    }

    /// Creates the tables if missing.
    pub async fn migrate(&self, pool: &sqlx::PgPool) -> Result<(), sqlx::Error> {
        for ddl in [
            format!(
                "CREATE TABLE IF NOT EXISTS {} (order_id BIGSERIAL PRIMARY KEY, \
                 customer TEXT NOT NULL, amount_cents BIGINT NOT NULL)",
                self.orders
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {} (coupon_id BIGSERIAL PRIMARY KEY, \
                 trade_no TEXT NOT NULL)",
                self.coupons
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {} (row_id BIGSERIAL PRIMARY KEY, \
                 order_id TEXT NOT NULL, step TEXT NOT NULL)",
                self.checkouts
            ),
        ] {
            sqlx::query(&ddl).execute(pool).await?;
        }
        Ok(())
    }
}

/// The request's transaction, or `INTERNAL` (a route without the transactional layer).
fn transaction<T>(request: &Request<T>) -> Result<Tx<Postgres>, Status> {
    Ok(Tx::from_extensions(request.extensions().get())?)
}

/// The call's run with steps, or `INTERNAL` (a route without the steps layer).
fn run_of<T>(request: &Request<T>) -> Result<Steps<PostgresStore>, Status> {
    Ok(Steps::from_extensions(request.extensions().get())?)
}

/// A failed step: an ending is `FAILED_PRECONDITION` (stored), anything else `UNAVAILABLE`
/// (not stored: the run stays resumable, and the client's retry resumes it).
fn step_status(error: StepError) -> Status {
    match error {
        StepError::End(answer) => Status::failed_precondition(answer.to_string()),
        error => Status::unavailable(error.to_string()),
    }
}

fn internal(error: sqlx::Error) -> Status {
    Status::from(idempotency_sql::from_sqlx(error))
}

#[tonic::async_trait]
impl Payments for LedgerService {
    async fn create_order(
        &self,
        request: Request<CreateOrderRequest>,
    ) -> Result<Response<Order>, Status> {
        let mut tx = transaction(&request)?;
        let request = request.into_inner();
        if request.amount_cents <= 0 {
            return Err(Status::invalid_argument("amount_cents must be positive"));
        }
        let sql = format!(
            "INSERT INTO {} (customer, amount_cents) VALUES ($1, $2) RETURNING order_id",
            self.orders
        );
        let (id,): (i64,) = sqlx::query_as(&sql)
            .bind(&request.customer)
            .bind(request.amount_cents)
            .fetch_one(&mut *tx)
            .await
            .map_err(internal)?;
        Ok(Response::new(Order {
            order_id: format!("ord-{id:06}"),
            customer: request.customer,
            amount_cents: request.amount_cents,
            status: "CREATED".to_owned(),
            sequence: u64::try_from(id).unwrap_or(0),
        }))
    }

    async fn payment_callback(
        &self,
        request: Request<PaymentCallbackRequest>,
    ) -> Result<Response<CallbackAck>, Status> {
        let mut tx = transaction(&request)?;
        let request = request.into_inner();
        let sql = format!("INSERT INTO {} (trade_no) VALUES ($1)", self.coupons);
        sqlx::query(&sql)
            .bind(&request.trade_no)
            .execute(&mut *tx)
            .await
            .map_err(internal)?;
        tokio::time::sleep(self.callback_delay).await;
        if request.trade_no.starts_with(FAILING_TRADE) {
            return Err(Status::unavailable("the gateway's ledger is unreachable"));
        }
        let sql = format!("SELECT COUNT(*) FROM {}", self.coupons);
        let (total,): (i64,) = sqlx::query_as(&sql)
            .fetch_one(&mut *tx)
            .await
            .map_err(internal)?;
        Ok(Response::new(CallbackAck {
            trade_no: request.trade_no,
            coupons_granted: 1,
            coupons_total: u64::try_from(total).unwrap_or(0),
        }))
    }

    /// Two steps, `reserve` then `grant`, each a row in the call's own transaction with its
    /// checkpoint. An order id starting with [`FAILING_TRADE`] fails between them on a first
    /// attempt (`UNAVAILABLE`): the retry resumes after `reserve`.
    async fn checkout(
        &self,
        request: Request<CheckoutRequest>,
    ) -> Result<Response<CheckoutAck>, Status> {
        let mut run = run_of(&request)?;
        let order_id = request.into_inner().order_id;
        let insert = format!(
            "INSERT INTO {} (order_id, step) VALUES ($1, $2) RETURNING row_id",
            self.checkouts
        );
        let row = async |run: &mut Steps<PostgresStore>, step: &'static str| {
            run.local(step, async |tx| {
                let (id,): (i64,) = sqlx::query_as(&insert)
                    .bind(&order_id)
                    .bind(step)
                    .fetch_one(&mut **tx)
                    .await?;
                Ok(id)
            })
            .await
            .map_err(step_status)
        };
        let reservation = row(&mut run, "reserve").await?;
        if order_id.starts_with(FAILING_TRADE) && !run.resumed() {
            return Err(Status::unavailable("the coupon service is unreachable"));
        }
        let coupon = row(&mut run, "grant").await?;
        Ok(Response::new(CheckoutAck {
            order_id,
            reservation,
            coupon,
        }))
    }

    type WatchOrdersStream = futures_util::stream::Empty<Result<Order, Status>>;

    async fn watch_orders(
        &self,
        _request: Request<WatchOrdersRequest>,
    ) -> Result<Response<Self::WatchOrdersStream>, Status> {
        Err(Status::unimplemented("not served by the ledger"))
    }
}

/// The transactional layer in gRPC mode, guarding the two unary methods, keys scoped by
/// [`principal`](crate::principal).
pub fn transactional_layer(store: PostgresStore) -> TransactionalLayer<PostgresStore> {
    IdempotencyLayer::builder(store)
        .principal(super::server::principal)
        .grpc()
        .namespace("payments.v1")
        .only_paths([CREATE_ORDER, PAYMENT_CALLBACK])
        .build_transactional()
}

/// The steps layer in gRPC mode, guarding `Checkout`, keys scoped by
/// [`principal`](crate::principal).
pub fn steps_layer(store: PostgresStore) -> StepsLayer<PostgresStore> {
    IdempotencyLayer::builder(store)
        .principal(super::server::principal)
        .grpc()
        .namespace("payments.v1.checkout")
        .only_paths([CHECKOUT])
        .build_steps()
}

/// Serves `service` on `listener` behind [`transactional_layer`] (and `Checkout` behind
/// [`steps_layer`]) until the task is dropped.
pub async fn serve_transactional(
    listener: TcpListener,
    service: LedgerService,
    store: PostgresStore,
) -> Result<(), tonic::transport::Error> {
    Server::builder()
        .layer(transactional_layer(store.clone()))
        .layer(steps_layer(store))
        .add_service(PaymentsServer::new(service))
        .serve_with_incoming(TcpIncoming::from(listener))
        .await
}
