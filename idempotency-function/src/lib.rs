//! Idempotent functions: the runtime that `#[idempotent]` expands to.
//!
//! The attribute (re-exported here as `idempotent`, feature `macros`, on by default) expands a
//! function body into one call of [`run`] (or [`run_keeping_errors`]): the key, scope and
//! fingerprint go into a [`Call`], the body becomes an `async move` block that runs only when the
//! key is claimed. The same calls can be written by hand:
//!
//! ```
//! use idempotency_core::{Error, Idempotency, MemoryStore};
//! use idempotency_function::{self as function, Call};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let engine = Idempotency::new(MemoryStore::new());
//! let grant = |trade_no: &str| {
//!     let call = Call::new("coupons", trade_no).fingerprint("amount", &100);
//!     function::run::<Result<u32, Error>, _, _, _>(
//!         engine.clone(),
//!         call,
//!         From::from,
//!         async { Ok(7) }, // grant the coupon, return its id
//!     )
//! };
//! assert_eq!(grant("T1").await.unwrap(), 7);
//! assert_eq!(grant("T1").await.unwrap(), 7); // replayed, not granted again
//! # }
//! ```
//!
//! The records of functions are keyed by [`Mechanism::Function`](idempotency_core::Mechanism::Function):
//! an HTTP request, a consumer or a hand-written transaction with the same key in the same scope
//! never shares one. The transactional and state-machine modes of the attribute run in
//! `idempotency_sql::function`, on a [`Call`] too. Most services reach this crate through the
//! facade, as `idempotency::function` (feature `macros`).
#![cfg_attr(docsrs, feature(doc_cfg))]

mod as_engine;
mod call;
mod fn_result;
mod recorded;
mod runner;

pub use as_engine::AsEngine;
pub use call::Call;
pub use fn_result::FnResult;
pub use recorded::Recorded;
pub use runner::{STATUS_ERR, STATUS_OK, run, run_keeping_errors};

#[cfg(feature = "macros")]
#[cfg_attr(docsrs, doc(cfg(feature = "macros")))]
pub use idempotency_macros::idempotent;

/// The README's code blocks, compiled as doctests so the README stays true.
#[cfg(all(doctest, feature = "macros"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
