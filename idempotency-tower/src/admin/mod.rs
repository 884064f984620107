//! The admin API (feature `admin`): the operations of [`idempotency_operations`] as an
//! axum [`Router`](axum::Router) of JSON endpoints, to mount behind the service's own
//! authentication.
//!
//! It lives here, beside the layers, because the services that mount it already depend on
//! this crate for their HTTP front end and hold the
//! [`Admin`](idempotency_operations::Admin) of the store their layers use; the
//! `idempotency` command line (package `idempotency-cli`) is the same operations for
//! operators, with its own dependencies (clap), which a service should not carry.
//!
//! | method and path | body or query | answer |
//! |---|---|---|
//! | `GET /stuck` | `namespace`, `older_than_ms`, `limit` (≤ 1000) | `{"records": [view…]}` |
//! | `GET /records` | `namespace`, `state`, `since_ms`, `older_than_ms`, `min_attempts`, `min_conflicts` (1: the records that met a conflicting duplicate), `cursor` | one batch: `{"records", "examined", "next_cursor"}` |
//! | `GET /stats` | `namespace`, `since_ms`, `older_than_ms` | counts per state, oldest abandoned age |
//! | `POST /inspect` | a target, `"body": true` for the stored body | `{"record": view}` or `{"record": null}` |
//! | `POST /release`, `POST /delete`, `POST /resume` (a run with steps, resumed now) | a target, its `fence`, `reason` | `{"applied": true}`, or 409 problem+json with `"applied": false, "refusal"` |
//! | `POST /complete` | the same, and `status`, `body`, `encoding` (`http` or `raw`), `ttl_ms` | the same |
//! | `POST /reconcile` | `namespace`, `principal`, `mechanism`?, `keys` | `{"results": [{"index", "key_hash", "state", "mechanism", …}]}`: one per record a key has (a key with records of several front ends has several), `absent` when none |
//! | `POST /purge` | `namespace`, `cursor`, `max_batches` (default 10), `archive_table` | `{"purged", "examined", "batches", "next_cursor"}` |
//!
//! A **target** is `{"namespace", "principal"?, "mechanism"?, "key"}` (the raw key, looked
//! for under every front end's key derivation unless `mechanism` names one: `request`,
//! `function`, `transaction`, `message`; a key with records of several is refused, 400,
//! naming each one's `key_hash`) or `{"key_hash"}`; a **fence** is the
//! `{"token", "updated_at_ms"}` of the record as listed. Views are
//! [`RecordView`](idempotency_operations::RecordView)s: storage keys, never raw keys (a
//! reconciliation answers by index), and a stored body only for one record asked for by its
//! key.
//!
//! **Strangers are refused.** Every request, reads included, needs an authenticated
//! [`Operator`]: the request extension an outer auth layer inserts ([`admin_router`]), or the
//! one the router's own verifier finds in the request's head ([`admin_router_verified`]).
//! Without one the answer is **401** problem+json and nothing runs. The operator is who the
//! audit names; a request body naming an `actor` is refused (400). A refused action's 409
//! says why (`absent`, `moved_on`, `not_in_progress`) but never shows the record as it is
//! now: list it again. Errors are RFC 9457 `application/problem+json`.
//!
//! ```
//! use idempotency_core::MemoryStore;
//! use idempotency_operations::{Admin, TracingAudit};
//! use idempotency_tower::admin::{Operator, admin_router, admin_router_verified};
//!
//! let admin = Admin::new(std::sync::Arc::new(MemoryStore::new()), TracingAudit);
//! // Behind the service's own auth layer, which inserts an `Operator` extension:
//! let app: axum::Router = axum::Router::new().nest("/admin/idempotency", admin_router(admin.clone()));
//! // app = app.layer(your_auth_layer);
//! // Or with the router's own check of the request's head:
//! let verified = admin_router_verified(admin, |head: &http::request::Parts| {
//!     let token = head.headers.get("authorization")?.to_str().ok()?;
//!     (token == "Bearer from-your-secret-store").then(|| Operator("ci-bot".to_owned()))
//! });
//! # let _ = (app, verified);
//! ```

mod actions;
mod auth;
mod error;
mod reads;
mod requests;
mod router;

pub use requests::Operator;
pub use router::{admin_router, admin_router_verified};
