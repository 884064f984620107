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

/// The path of `Checkout`, a run with steps.
pub const CHECKOUT: &str = "/payments.v1.Payments/Checkout";

/// The principal a call's keys are scoped by: for `PaymentCallback`, the gateway (its
/// notifications share one scope); for `CreateOrder`, the caller its `authorization: Bearer`
/// metadata names (none: refused `UNAUTHENTICATED`), so one caller never gets another's stored
/// order. The example has no user database: each bearer token is a caller of its own; a real
/// service puts the identity its authentication layer verified here.
pub fn principal(parts: &tonic::codegen::http::request::Parts) -> Option<String> {
    if parts.uri.path() == PAYMENT_CALLBACK {
        return Some("gateway".to_owned());
    }
    let token = parts
        .headers
        .get("authorization")?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")?
        .trim();
    (!token.is_empty()).then(|| token.to_owned())
}

/// The idempotency layer in gRPC mode, guarding the two unary methods only (the streaming
/// `WatchOrders` passes through), keys scoped by [`principal`].
pub fn idempotency_layer<S: Store>(store: S) -> IdempotencyLayer<S> {
    IdempotencyLayer::builder(store)
        .principal(principal)
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
