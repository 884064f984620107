//! One-time tokens against front-end double submits, as a tower layer.
//!
//! A page asks a [`TokenStore`] for a token when it renders a form
//! ([`TokenStore::issue`]) and the form sends it back in the `Idempotency-Token` header, or in a
//! hidden form field ([`TokenLayer::form_field`]) or a JSON body field
//! ([`TokenLayer::json_field`]) for plain HTML forms and scripts that cannot set headers. The
//! [`TokenLayer`] consumes the token before the handler runs: exactly one submit per token gets
//! through, every other one (missing, unknown, expired or already used token) is refused with
//! **409** `application/problem+json` ([`RefusalKind::TokenRejected`]) and never reaches the
//! handler. A failing token store answers **503** + `Retry-After`.
//!
//! **Tokens do not protect callbacks, queues or RPC retries.** A payment provider's callback, a
//! redelivered message or a retried RPC carries no token issued by your page; guard those with
//! idempotency keys ([`crate::IdempotencyLayer`]). Tokens only stop a user from submitting the
//! same form twice (double clicks, the back button, a resubmitted page).
//!
//! ```
//! use axum::{Router, routing::post};
//! use idempotency_core::Scope;
//! use idempotency_token::{DEFAULT_TOKEN_TTL, MemoryTokenStore, TokenStore};
//! use idempotency_tower::{IDEMPOTENCY_TOKEN, TokenLayer};
//! use std::sync::Arc;
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let tokens = Arc::new(MemoryTokenStore::new());
//! let app = Router::new()
//!     .route("/checkout", post(|| async { "ordered" }))
//!     .layer(TokenLayer::new(Arc::clone(&tokens), "checkout"));
//!
//! // The page that renders the form issues the token in the same scope.
//! let token = tokens.issue(&Scope::new("checkout"), DEFAULT_TOKEN_TTL).await.unwrap();
//! let submit = || {
//!     http::Request::post("/checkout")
//!         .header(IDEMPOTENCY_TOKEN, token.value.as_str())
//!         .body(axum::body::Body::empty())
//!         .unwrap()
//! };
//! assert_eq!(app.clone().oneshot(submit()).await.unwrap().status(), 200);
//! assert_eq!(app.oneshot(submit()).await.unwrap().status(), 409);
//! # }
//! ```
//!
//! Laid out as tower's middleware are: `layer` ([`TokenLayer`] and its settings), `service`
//! ([`TokenService`], which consumes the token), `future` ([`TokenFuture`]); `find` reads the
//! token from the request.

mod find;
mod future;
mod layer;
mod service;

pub use future::TokenFuture;
pub use layer::{DEFAULT_TOKEN_BODY_BYTES, IDEMPOTENCY_TOKEN, TokenLayer};
pub use service::TokenService;
