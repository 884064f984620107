//! Tower middleware that makes HTTP (and gRPC) endpoints idempotent.
//!
//! [`IdempotencyLayer`] guards POST and PATCH requests (configurable) carrying an
//! `Idempotency-Key`. The first request with a key runs the handler and its response is stored;
//! a retry gets the stored response back instead of running the handler again:
//!
//! | situation | answer |
//! |---|---|
//! | first request | the handler's response |
//! | completed duplicate | the stored status, headers, body (and trailers), plus `Idempotent-Replayed: true` |
//! | duplicate while the first is in flight | 409 + `Retry-After`; or, with [`InFlightPolicy::Wait`], a bounded wait then the replay |
//! | same key, other payload | 422, the record untouched |
//! | key missing where required / malformed (`a1,a2` is two keys) | 400; where optional, the request passes through untouched |
//! | keys scoped per principal, and the request has none | 401 |
//! | body larger than the layer reads | 413 |
//! | body the layer reads slower than its read timeout (30 s) | 408 |
//! | too many handlers of departed clients still running | 503 + `Retry-After` |
//! | store unavailable or timed out | 503 + `Retry-After`; or, fail-open, the request passes through (logged, counted) |
//!
//! Refusals are RFC 9457 `application/problem+json` ([`ProblemJson`], pluggable through
//! [`RenderRefusal`]) and never stored. 2xx, 3xx and 4xx are stored, except answers a retry
//! can change (401, 403, 407, 408, 409, 421, 423, 425, 428, 429, 451); 5xx and service errors
//! release the key so the retry runs again ([`StoragePolicy`] has the table, with why).
//! Hop-by-hop headers and `Date` are never stored, `Set-Cookie` and credentials only when
//! enabled. The handler runs in the request's own future (no task per request); a client that
//! disconnects does not abandon it: the still-running handler moves to a task of its own, goes
//! on to its end with its lease renewed, and its response is recorded for the retry. Keys are
//! scoped by namespace and by a scope chosen when the layer is built (it cannot be built
//! without one): the principal an outer authentication layer put in the request's extensions
//! ([`IdempotencyLayerBuilder::principal_from_extension`]), or one scope shared by every caller
//! ([`IdempotencyLayerBuilder::shared_scope`], for a gateway's verified callbacks). They are
//! hashed before they reach the store.
//!
//! The claim, lease keep-alive and complete/release are the engine's
//! ([`idempotency_core::Idempotency`]): a new key costs one claim and one complete, a replay one
//! claim.
//!
//! ```
//! use axum::{Router, routing::post};
//! use idempotency_core::MemoryStore;
//! use idempotency_tower::IdempotencyLayer;
//! use std::time::Duration;
//! use tower::ServiceExt;
//!
//! /// The caller's tenant, put in the request's extensions by the authentication layer.
//! #[derive(Clone)]
//! struct Tenant(String);
//! impl AsRef<str> for Tenant {
//!     fn as_ref(&self) -> &str {
//!         &self.0
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let layer = IdempotencyLayer::builder(MemoryStore::new())
//!     .namespace("payments")
//!     .principal_from_extension::<Tenant>()
//!     .ttl(Duration::from_secs(24 * 3600))
//!     .build();
//! // Router::layer wraps what is already there: the authentication layer, added after the
//! // idempotency layer, runs before it.
//! let app = Router::new()
//!     .route("/payments", post(|| async { "paid" }))
//!     .layer(layer);
//!
//! let request = || {
//!     http::Request::post("/payments")
//!         .header("idempotency-key", "\"order-42\"")
//!         .extension(Tenant("acme".to_owned())) // as the authentication layer would
//!         .body(axum::body::Body::from("{\"amount\":10}"))
//!         .unwrap()
//! };
//! let first = app.clone().oneshot(request()).await.unwrap();
//! assert_eq!(first.status(), 200);
//! let retry = app.oneshot(request()).await.unwrap();
//! assert_eq!(retry.headers()["idempotent-replayed"], "true");
//! # }
//! ```
//!
//! # Transactional HTTP
//!
//! With a SQL store (features `postgres`, `mysql`, `sqlite`),
//! [`IdempotencyLayerBuilder::build_transactional`] claims each key inside the request's own
//! database transaction, which the handler takes ([`transactional::Tx`], an axum extractor with
//! the `axum` feature) for its business writes; the answer is stored and committed with them.
//! See [`transactional`].
//!
//! # gRPC
//!
//! With the `grpc` feature, the preset [`IdempotencyLayerBuilder::grpc`] takes the key from
//! metadata `idempotency-key`, refuses with gRPC statuses ([`GrpcStatus`]: `INVALID_ARGUMENT`,
//! `ABORTED`, `FAILED_PRECONDITION`,
//! `UNAVAILABLE`), stores by `grpc-status` and replays message, metadata and trailers. It works on
//! plain `http` types, so it sits in front of tonic without depending on it. Streaming calls must
//! not be guarded: list the unary methods with [`IdempotencyLayerBuilder::only_paths`], checked
//! against the service's descriptor set with `grpc_descriptor` (feature `grpc-descriptor`).
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod answer;
mod body;
mod callback;
mod codec;
mod collect;
mod deadline;
mod detach;
mod fingerprint;
#[cfg(any(feature = "sql", feature = "steps"))]
mod flights;
#[cfg(feature = "grpc")]
mod grpc;
mod guarded;
mod headers;
mod idempotency;
mod json;
mod key_source;
mod policy;
mod refusal;
mod request;
#[cfg(feature = "steps")]
#[cfg_attr(docsrs, doc(cfg(feature = "steps")))]
pub mod steps;
mod stored;
mod token;
#[cfg(feature = "sql")]
pub mod transactional;

#[cfg(feature = "admin")]
pub mod admin;
#[cfg(feature = "hmac")]
pub mod verify;

pub use body::{RequestBody, ResponseBody};
pub use callback::{Callback, ConflictAnswer, PER_ATTEMPT_FIELDS};
pub use codec::{DecodeError, StoredResponse};
pub use deadline::Deadline;
pub use fingerprint::{FingerprintFn, FingerprintSource};
#[cfg(feature = "grpc")]
pub use grpc::GrpcStatus;
pub use guarded::{GuardedService, ResponseFuture};
pub use headers::{IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED};
pub use idempotency::{
    DEFAULT_BODY_READ_TIMEOUT, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_DETACHED,
    DEFAULT_MAX_STORED_BYTES, DEFAULT_MAX_STORED_HEADER_BYTES, DEFAULT_MAX_STORED_HEADERS,
    IdempotencyLayer, IdempotencyLayerBuilder, IdempotencyService, PrincipalFn, ScopeChosen,
    ScopeIsChosen, ScopeUnchosen, VerifyFn,
};
pub use idempotency_core::InFlightPolicy;
pub use key_source::{KeyFn, KeySource, key_from_headers};
pub use policy::{StoragePolicy, StoreFn};
pub use refusal::{ProblemJson, Refusal, RefusalKind, RenderRefusal};
pub use token::{
    DEFAULT_TOKEN_BODY_BYTES, IDEMPOTENCY_TOKEN, TokenFuture, TokenLayer, TokenService,
};
