//! The Payments service itself, unaware of idempotency.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::Stream;
use tokio::sync::{Mutex, Semaphore};
use tonic::metadata::MetadataValue;
use tonic::{Request, Response, Status};

use super::proto::payments_server::Payments;
use super::proto::{
    CallbackAck, CheckoutAck, CheckoutRequest, CreateOrderRequest, Order, PaymentCallbackRequest,
    WatchOrdersRequest,
};

/// An in-memory Payments service that counts every execution, so duplicates are visible.
#[derive(Clone, Debug, Default)]
pub struct PaymentsService {
    orders: Arc<Mutex<Vec<Order>>>,
    executions: Arc<AtomicU64>,
    entered: Arc<AtomicU64>,
    coupons: Arc<AtomicU64>,
    gate: Option<Arc<Semaphore>>,
    first_call_delay: Option<std::time::Duration>,
}

impl PaymentsService {
    /// A service with no orders.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes `CreateOrder` wait for a permit of `gate` before doing anything (used to hold a call
    /// in flight, or to make it outlive a client deadline).
    pub fn with_gate(mut self, gate: Arc<Semaphore>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// Makes the first `CreateOrder` execution take `delay` (to show a client deadline
    /// expiring while the server finishes the work).
    pub fn with_first_call_delay(mut self, delay: std::time::Duration) -> Self {
        self.first_call_delay = Some(delay);
        self
    }

    /// How many times `CreateOrder` and `PaymentCallback` ran (duplicates answered by the layer
    /// do not count).
    pub fn executions(&self) -> u64 {
        self.executions.load(Ordering::SeqCst)
    }

    /// How many `CreateOrder` calls reached the handler (counted before the gate).
    pub fn entered(&self) -> u64 {
        self.entered.load(Ordering::SeqCst)
    }

    /// Coupons granted in total.
    pub fn coupons(&self) -> u64 {
        self.coupons.load(Ordering::SeqCst)
    }
}

type OrderStream = Pin<Box<dyn Stream<Item = Result<Order, Status>> + Send>>;

#[tonic::async_trait]
impl Payments for PaymentsService {
    async fn create_order(
        &self,
        request: Request<CreateOrderRequest>,
    ) -> Result<Response<Order>, Status> {
        self.entered.fetch_add(1, Ordering::SeqCst);
        if let Some(gate) = &self.gate {
            let _permit = gate
                .acquire()
                .await
                .map_err(|_| Status::unavailable("shutting down"))?;
        }
        let sequence = self.executions.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(delay) = self.first_call_delay.filter(|_| sequence == 1) {
            tokio::time::sleep(delay).await;
        }
        let request = request.into_inner();
        if request.amount_cents <= 0 {
            let mut status = Status::invalid_argument("amount_cents must be positive");
            status
                .metadata_mut()
                .insert("x-error-ref", MetadataValue::from(sequence));
            return Err(status);
        }
        let mut orders = self.orders.lock().await;
        let order = Order {
            order_id: format!("ord-{sequence:06}"),
            customer: request.customer,
            amount_cents: request.amount_cents,
            status: "CREATED".to_owned(),
            sequence,
        };
        orders.push(order.clone());
        let mut response = Response::new(order);
        response
            .metadata_mut()
            .insert("x-order-sequence", MetadataValue::from(sequence));
        Ok(response)
    }

    async fn payment_callback(
        &self,
        request: Request<PaymentCallbackRequest>,
    ) -> Result<Response<CallbackAck>, Status> {
        self.executions.fetch_add(1, Ordering::SeqCst);
        let request = request.into_inner();
        if request.trade_no.is_empty() {
            return Err(Status::invalid_argument("trade_no is required"));
        }
        // The side effect the incident repeated six times: grant a coupon.
        let total = self.coupons.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(Response::new(CallbackAck {
            trade_no: request.trade_no,
            coupons_granted: 1,
            coupons_total: total,
        }))
    }

    async fn checkout(
        &self,
        _request: Request<CheckoutRequest>,
    ) -> Result<Response<CheckoutAck>, Status> {
        Err(Status::unimplemented(
            "Checkout is a run with steps: served by the ledger (PostgreSQL)",
        ))
    }

    type WatchOrdersStream = OrderStream;

    async fn watch_orders(
        &self,
        _request: Request<WatchOrdersRequest>,
    ) -> Result<Response<Self::WatchOrdersStream>, Status> {
        self.executions.fetch_add(1, Ordering::SeqCst);
        let orders = self.orders.lock().await.clone();
        let stream = futures_util::stream::iter(orders.into_iter().map(Ok));
        Ok(Response::new(Box::pin(stream)))
    }
}
