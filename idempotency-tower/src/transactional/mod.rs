//! Transactional HTTP and gRPC: the idempotency record in the handler's own database
//! transaction (features `postgres`, `mysql`, `sqlite`).
//!
//! The iron rule of the post-mortem: the dedup record is written in the **same transaction** as
//! the business change. With [`TransactionalLayer`], a guarded request's key is claimed inside a
//! new transaction on the store's database; the handler takes that transaction ([`Tx`]) and does
//! its business writes in it; when it answers, the layer stores the response as the key's
//! outcome in the same transaction and commits. One commit, two statements of the layer's
//! (claim, complete) beside the handler's own.
//!
//! | situation | answer |
//! |---|---|
//! | first request | the handler's response, committed with its writes and its record |
//! | completed duplicate | the stored response, `Idempotent-Replayed: true` |
//! | duplicate while the first runs | waits on the first one's uncommitted record (in memory within one process, on the row across processes) up to the in-flight bound and the caller's deadline, then replays; or 409 at once ([`InFlightPolicy::Reject`](idempotency_core::InFlightPolicy::Reject)) |
//! | same key, other payload / bad key / body too large / not verified | 422 / 400 / 413 / 401, as the layer |
//! | database unavailable, claim or commit failed | 503 + `Retry-After`; nothing of the request stays |
//! | handler error, response the storage policy does not keep, panic, killed process | rolled back, business writes included: no record, the retry runs at once |
//!
//! A client that disconnects does not abandon the handler: it runs to its commit. A handler
//! that must keep its writes without storing a record calls [`Tx::commit_without_record`];
//! one with work that must wait for the commit (and never run without it) registers it with
//! [`Tx::after_commit`].
//! How a duplicate waits or is rejected on each database is in
//! [`TxStore`](idempotency_sql::TxStore)'s docs (SQLite can only wait).
//!
//! ```no_run
//! # #[cfg(all(feature = "postgres", feature = "axum"))]
//! # async fn demo(pool: sqlx::PgPool) -> Result<(), idempotency_core::Error> {
//! use axum::{Json, Router, routing::post};
//! use idempotency_core::Error;
//! use idempotency_sql::PostgresStore;
//! use idempotency_tower::IdempotencyLayer;
//! use idempotency_tower::transactional::Tx;
//! use sqlx::Postgres;
//!
//! #[derive(serde::Deserialize)]
//! struct Paid { trade_no: String, order_id: i64 }
//!
//! async fn paid(mut tx: Tx<Postgres>, Json(paid): Json<Paid>) -> Result<&'static str, Error> {
//!     let moved = sqlx::query("UPDATE orders SET status = 'PAID' WHERE id = $1 AND status = 'WAIT_PAY'")
//!         .bind(paid.order_id)
//!         .execute(&mut *tx)
//!         .await
//!         .map_err(idempotency_sql::from_sqlx)?;
//!     if moved.rows_affected() == 1 {
//!         sqlx::query("INSERT INTO coupons (order_id) VALUES ($1)")
//!             .bind(paid.order_id)
//!             .execute(&mut *tx)
//!             .await
//!             .map_err(idempotency_sql::from_sqlx)?;
//!     }
//!     Ok("paid") // stored and committed with the coupon, by the layer
//! }
//!
//! let store = PostgresStore::new(pool);
//! store.migrate().await?;
//! let app: Router = Router::new().route("/payments/callback", post(paid)).layer(
//!     IdempotencyLayer::builder(store)
//!         .namespace("payments.callback")
//!         .callback("/trade_no")
//!         .shared_scope() // the gateway's callbacks; add `.verify(..)` for its signature
//!         .build_transactional(),
//! );
//! # let _ = app; Ok(()) }
//! ```

mod layer;
pub(crate) mod run;
mod service;
mod tx;

pub use layer::TransactionalLayer;
pub use service::TransactionalService;
pub use tx::{Tx, TxHandle, TxUnavailable};
