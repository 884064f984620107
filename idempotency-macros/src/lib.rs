//! The `#[idempotent]` attribute: run an `async fn` once per key.
//!
//! Use it through `idempotency_core::idempotent` (feature `macros`). The smallest use:
//!
//! ```
//! use idempotency_core::{Idempotency, IdempotentError, MemoryStore, idempotent};
//!
//! #[idempotent(key = trade_no, store = engine)]
//! async fn grant_coupon(engine: &Idempotency<MemoryStore>, trade_no: &str) -> Result<u64, IdempotentError> {
//!     Ok(42) // runs once per trade_no; a retry gets the stored 42
//! }
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! # let engine = Idempotency::new(MemoryStore::new());
//! # assert_eq!(grant_coupon(&engine, "T1").await.unwrap(), 42);
//! # assert_eq!(grant_coupon(&engine, "T1").await.unwrap(), 42);
//! # }
//! ```
//!
//! # Dedup mode
//!
//! On any `async fn … -> Result<T, E>` (free functions, methods, axum handlers, queue
//! handlers) where `T: Serialize + DeserializeOwned` and `E: From<IdempotentError>`:
//!
//! - the first call with a key runs the body and stores `Ok(T)` as JSON;
//! - a duplicate returns the stored `T` without running the body;
//! - `Err(E)` releases the key so a retry runs again (or, with `on_error = "keep"`, is stored and
//!   replayed too; `E` must then be `Serialize + DeserializeOwned`);
//! - a duplicate while the first call runs, the same key with other fingerprinted arguments, and
//!   store failures come back as `E::from(IdempotentError::{InFlight, Mismatch, Store, …})`, so
//!   the function's error type decides the status code.
//!
//! | argument | meaning |
//! |---|---|
//! | `key = expr` | required: the key, an expression over the arguments of any `Display` type (`event.trade_no`, `format!("{a}:{b}")`) |
//! | `store = expr` (or `engine = expr`) | required: an `Idempotency<S>` engine or an `Arc` of a store: an argument, `self.field`, a static, a call |
//! | `scope = "payments"` | the namespace; default `module_path!()::fn_name` (set it on methods whose names repeat in one module) |
//! | `principal = expr` | restricts the scope to a tenant or user: two principals never share a record |
//! | `fingerprint = [a, b.amount]` | arguments hashed as canonical JSON (`Serialize`); the same key with other values is a `Mismatch`. Default: none, only the key counts |
//! | `ttl = "24h"`, `lease = "30s"` | override the engine's settings (units `ms s m h d`, combinable: `"1h30m"`) |
//! | `wait = "5s"` | a duplicate in flight waits (bounded) for the first call's result instead of failing with `InFlight` |
//! | `on_error = "release"` / `"keep"` | what an `Err` does (default `release`) |
//! | `map_err = path` | a `fn(IdempotentError) -> E`, for an `E` that cannot implement `From` (e.g. `tonic::Status`) |
//!
//! The function keeps its signature, visibility, attributes, generics and receiver; it stacks
//! with `#[tracing::instrument]` and `#[axum::debug_handler]` in either order. The body becomes
//! the `async move` block of one call of `idempotency_core::function::run`, which `cargo expand`
//! shows in a dozen lines. If the caller drops the future mid-way, the key is released.
//!
//! # Errors at compile time
//!
//! A non-`async` function, a return type other than `Result`, a missing `key`/`store`, a
//! duplicate or unknown argument, a malformed duration and an expression naming something that is
//! not an argument are each reported on their own span, next to the unchanged function.
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod attr;
mod check;
mod duration;
mod expand;
mod state;
mod tx;

use proc_macro::TokenStream;

/// Runs an `async fn … -> Result<T, E>` once per key; see the [crate docs](crate).
#[proc_macro_attribute]
pub fn idempotent(args: TokenStream, item: TokenStream) -> TokenStream {
    let original = item.clone();
    let result = syn::parse::<attr::Args>(args)
        .and_then(|args| Ok((args, syn::parse::<syn::ItemFn>(item)?)))
        .and_then(|(args, item)| expand::expand(args, item));
    match result {
        Ok(tokens) => tokens.into(),
        Err(error) => token_stream_with_error(original, error),
    }
}

/// The original item plus the error, so the function still exists for the IDE and for
/// the rest of the crate (tokio-macros does the same).
fn token_stream_with_error(mut item: TokenStream, error: syn::Error) -> TokenStream {
    item.extend(TokenStream::from(error.into_compile_error()));
    item
}
