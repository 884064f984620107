//! The admin API (feature `admin`): the operations of
//! [`idempotency_core::operations`] as an axum [`Router`] of JSON endpoints, to mount behind
//! the service's own authentication.
//!
//! It lives here, beside the layers, because the services that mount it already depend on
//! this crate for their HTTP front end and hold the [`Admin`] of the store their layers use;
//! the `idempotency` command line (package `idempotency-cli`) is the same operations for
//! operators, with its own dependencies (clap), which a service should not carry.
//!
//! | method and path | body or query | answer |
//! |---|---|---|
//! | `GET /stuck` | `namespace`, `older_than_ms`, `limit` (≤ 1000) | `{"records": [view…]}` |
//! | `GET /records` | `namespace`, `state`, `since_ms`, `older_than_ms`, `min_attempts`, `cursor` | one batch: `{"records", "examined", "next_cursor"}` |
//! | `GET /stats` | `namespace`, `since_ms`, `older_than_ms` | counts per state, oldest abandoned age |
//! | `POST /inspect` | a target, `"body": true` for the stored body | `{"record": view}` or `{"record": null}` |
//! | `POST /release`, `POST /delete` | a target, its `fence`, `reason` | `{"applied": true}`, or 409 `{"applied": false, "refusal", "current"}` |
//! | `POST /complete` | the same, and `status`, `body`, `encoding` (`http` or `raw`), `ttl_ms` | the same |
//! | `POST /reconcile` | `namespace`, `principal`, `mechanism`, `keys` | `{"results": [{"index", "key_hash", "state", …}]}` |
//! | `POST /purge` | `namespace`, `cursor`, `max_batches` (default 10), `archive_table` | `{"purged", "examined", "batches", "next_cursor"}` |
//!
//! A **target** is `{"namespace", "principal"?, "mechanism"? (default request), "key"}` (the
//! raw key, hashed as the layers hash it) or `{"key_hash"}`; a **fence** is the
//! `{"token", "updated_at_ms"}` of the record as listed. Views are
//! [`RecordView`](idempotency_core::operations::RecordView)s: storage keys, never raw keys (a
//! reconciliation answers by index), and a stored body only for one record asked for by its
//! key. Who acts is the [`Operator`] extension the service's auth layer inserts, else the
//! body's `actor`; every action is audited with it.
//!
//! ```
//! use idempotency_core::MemoryStore;
//! use idempotency_core::operations::{Admin, TracingAudit};
//! use idempotency_tower::admin::admin_router;
//!
//! let admin = Admin::new(std::sync::Arc::new(MemoryStore::new()), TracingAudit);
//! let app: axum::Router = axum::Router::new().nest("/admin/idempotency", admin_router(admin));
//! // app = app.layer(your_auth_layer);
//! # let _ = app;
//! ```

mod actions;
mod error;
mod reads;
mod requests;

use axum::Router;
use axum::routing::{get, post};
use idempotency_core::operations::Admin;

pub use requests::Operator;

/// The admin API's router over `admin` (see the [module docs](self)).
pub fn admin_router(admin: Admin) -> Router {
    Router::new()
        .route("/stuck", get(reads::stuck))
        .route("/records", get(reads::records))
        .route("/stats", get(reads::stats))
        .route("/inspect", post(reads::inspect))
        .route("/reconcile", post(reads::reconcile))
        .route("/release", post(actions::release))
        .route("/complete", post(actions::complete))
        .route("/delete", post(actions::delete))
        .route("/purge", post(actions::purge))
        .with_state(admin)
}
