//! The server: `Server::builder().layer(<the layer's gRPC mode>)`.

use idempotency_core::Store;
use idempotency_tower::IdempotencyLayer;
use tokio::net::TcpListener;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

use super::PaymentsService;
use super::proto::payments_server::PaymentsServer;

/// The path of `CreateOrder`.
pub const CREATE_ORDER: &str = "/payments.v1.Payments/CreateOrder";
/// The path of `PaymentCallback`.
pub const PAYMENT_CALLBACK: &str = "/payments.v1.Payments/PaymentCallback";

/// The idempotency layer in gRPC mode, guarding the two unary methods only (the streaming
/// `WatchOrders` passes through).
pub fn idempotency_layer<S: Store>(store: S) -> IdempotencyLayer<S> {
    IdempotencyLayer::builder(store)
        .shared_scope()
        .grpc()
        .namespace("payments.v1")
        .only_paths([CREATE_ORDER, PAYMENT_CALLBACK])
        .build()
}

/// Serves `service` on `listener` behind [`idempotency_layer`] until the task is dropped.
pub async fn serve<S: Store>(
    listener: TcpListener,
    service: PaymentsService,
    store: S,
) -> Result<(), tonic::transport::Error> {
    Server::builder()
        .layer(idempotency_layer(store))
        .add_service(PaymentsServer::new(service))
        .serve_with_incoming(TcpIncoming::from(listener))
        .await
}
