//! The payments service of the incident, made idempotent.
//!
//! A payment gateway retried one callback six times and the user got six coupons. This service
//! answers the same callback once, however often and however concurrently it arrives:
//!
//! - `POST /orders` (`{"user_id": 7, "amount_cents": 1299}`) requires an `Idempotency-Key`
//!   header; a retry replays the same order (`Idempotent-Replayed: true`). 201.
//! - `POST /payments/callback` (`{"trade_no": "T1", "order_id": 1}`): the gateway sends no
//!   header, so the key is the body's `trade_no` (the callback preset). The order moves
//!   `WAIT_PAY → PAID` and the coupon is granted by that transition, so only an applied
//!   transition grants. 200. With `CALLBACK_SECRET` set, the gateway's signature
//!   ([`signature`]) is checked before the key is claimed.
//! - `GET /orders/{order_id}`, `GET /users/{user_id}/coupons`, `POST /orders/{order_id}/cancel`.
//!
//! [`app`] is the service over memory or Redis ([`app_per_route`] the same, with axum's
//! per-route layers); over a SQL store it is [`transactional::transactional_app`], whose
//! layers claim each key in the request's own transaction, where the handlers write too.
//! [`bare`] serves the same handlers without any layer; [`incident`] the incident's original
//! callback, which grants on every call. The business state lives behind [`PaymentsRepo`]
//! ([`MemoryRepo`] here; SQL repositories keep orders and coupons in the records' database).
//! [`config::backend_from_env`] picks the store and repository from `IDEMPOTENCY_STORE`, and
//! [`service::spawn`] serves the right one.
//!
//! ```
//! use axum_payments::{AppState, bare};
//! let router: axum::Router = bare(AppState::in_memory());
//! # let _ = router;
//! ```
//!
//! Binaries: `payments` (the service, `cargo run -p axum-payments --bin payments`) and
//! `crash_target` (a tiny guarded service the crash tests kill and pause).
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod callers;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
pub mod checkout;
pub mod client;
pub mod config;
pub mod gateway;
mod handlers;
mod layers;
mod memory;
mod model;
mod naive;
mod problem;
pub mod provider;
pub mod reference;
mod repo;
mod routes;
mod server;
pub mod service;
pub mod signature;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
pub mod sql;
mod state;
mod telemetry;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
pub mod transactional;

pub use handlers::{cancel_order, create_order, get_order, payment_callback, user_coupons};
pub use layers::{
    CALLBACK_NAMESPACE, ORDERS_NAMESPACE, callback_layer, callback_layer_builder, orders_layer,
    orders_layer_builder,
};
pub use memory::MemoryRepo;
pub use model::{CouponCount, NewOrder, Order, OrderId, OrderStatus, PaymentCallback, UserId};
pub use naive::naive_payment_callback;
pub use problem::Problem;
pub use repo::{PaymentsRepo, RepoError, Transition};
pub use routes::{App, HttpService, app, app_per_route, bare, incident};
pub use server::Server;
pub use state::{AppState, DRILL_PAUSED};
pub use telemetry::init_logging;
