//! The gRPC Payments example: a tonic 0.14 service behind the idempotency layer's gRPC mode.
//!
//! - [`proto`]: code generated at build time from `proto/payments.proto` (protox, no `protoc`).
//! - [`PaymentsService`]: `CreateOrder`, `PaymentCallback` (unary, guarded) and `WatchOrders`
//!   (server streaming, passes through).
//! - [`idempotency_layer`] and [`serve`]: `Server::builder().layer(layer)` on a TCP listener.
//! - [`create_order_with_retries`]: the client side: retry after a deadline with the same key.
//! - With `postgres`, [`LedgerService`] and [`serve_transactional`]: the same service writing to
//!   PostgreSQL in each call's own transaction, behind transactional gRPC.

mod client;
#[cfg(feature = "postgres")]
mod ledger;
mod server;
mod service;

/// Generated messages, client and server of `payments.v1`.
#[allow(missing_docs, unreachable_pub, clippy::all)]
pub mod proto {
    tonic::include_proto!("payments.v1");
}

pub use client::{Attempt, create_order_with_retries, with_key};
#[cfg(feature = "postgres")]
pub use ledger::{
    FAILING_TRADE, LedgerService, serve_transactional, steps_layer, transactional_layer,
};
pub use server::{CHECKOUT, CREATE_ORDER, PAYMENT_CALLBACK, idempotency_layer, principal, serve};
pub use service::PaymentsService;
