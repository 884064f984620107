//! One-time tokens against front-end double submits.
//!
//! A page asks for a token ([`TokenStore::issue`]) when it renders a form and sends it back once
//! with the submit; [`TokenStore::consume`] accepts it exactly once, atomically. Tokens only
//! protect against a user submitting the same form twice: payment callbacks, queue redeliveries
//! and RPC retries never carry a token — guard those with idempotency keys.
//!
//! [`MemoryTokenStore`] keeps tokens in process; `idempotency_redis::RedisTokenStore` shares them
//! between instances, and `idempotency_tower::TokenLayer` consumes a request's token before its
//! handler runs. A store of your own passes `idempotency_test::token_conformance_tests!`.
//!
//! ```
//! use idempotency_core::Scope;
//! use idempotency_token::{DEFAULT_TOKEN_TTL, MemoryTokenStore, TokenOutcome, TokenStore};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), idempotency_core::StoreError> {
//! let tokens = MemoryTokenStore::new();
//! let scope = Scope::new("checkout").with_principal("user-7");
//! let token = tokens.issue(&scope, DEFAULT_TOKEN_TTL).await?; // render token.value into the form
//! assert_eq!(tokens.consume(&scope, &token.value).await?, TokenOutcome::Consumed);
//! assert_eq!(tokens.consume(&scope, &token.value).await?, TokenOutcome::Invalid); // a double submit
//! # Ok(()) }
//! ```
//!
//! Most services reach this crate through the facade, as `idempotency::token`.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod memory;
mod token;

pub use memory::MemoryTokenStore;
pub use token::{DEFAULT_TOKEN_TTL, OneTimeToken, TokenOutcome, TokenStore};

/// The README's code blocks, compiled as doctests so the README stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
