//! The payments service of the seed article, made idempotent.
//!
//! A payment gateway retried one callback six times and the user got six coupons. This service
//! answers the same callback once, however often and however concurrently it arrives:
//!
//! - `POST /orders` (`{"user_id": 7, "amount_cents": 1299}`) requires an `Idempotency-Key`
//!   header; a retry replays the same order (`Idempotent-Replayed: true`). 201.
//! - `POST /payments/callback` (`{"trade_no": "T1", "order_id": 1}`): the gateway sends no
//!   header, so the key is the body's `trade_no`. The order moves `WAIT_PAY → PAID` and the
//!   coupon is granted by that transition, so only an applied transition grants. 200.
//! - `GET /orders/{order_id}`, `GET /users/{user_id}/coupons`, `POST /orders/{order_id}/cancel`.
//!
//! [`app`] is the service ([`app_per_route`] the same, with axum's per-route layers); [`bare`] the same handlers without the idempotency layer;
//! [`incident`] the seed's original callback, which grants on every call. The business state
//! lives behind [`PaymentsRepo`] ([`MemoryRepo`] here; SQL repositories keep orders, coupons and
//! the dedup record in one database). [`config::backend_from_env`] picks the store and
//! repository from `IDEMPOTENCY_STORE`.
//!
//! ```
//! use idempotency_examples::payments::{AppState, bare};
//! let router: axum::Router = bare(AppState::in_memory());
//! # let _ = router;
//! ```

pub mod client;
pub mod config;
pub mod gateway;
mod handlers;
mod layers;
mod memory;
mod model;
mod naive;
mod problem;
pub mod reference;
mod repo;
mod routes;
mod server;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
pub mod sql;
mod state;
mod telemetry;

pub use handlers::{cancel_order, create_order, get_order, payment_callback, user_coupons};
pub use layers::{
    CALLBACK_NAMESPACE, CALLBACK_WAIT, ORDERS_NAMESPACE, callback_layer, orders_layer,
};
pub use memory::MemoryRepo;
pub use model::{CouponCount, NewOrder, Order, OrderId, OrderStatus, PaymentCallback, UserId};
pub use naive::naive_payment_callback;
pub use problem::Problem;
pub use repo::{PaymentsRepo, RepoError, Transition};
pub use routes::{App, HttpService, app, app_per_route, bare, incident};
pub use server::Server;
pub use state::AppState;
pub use telemetry::init_logging;
