//! Runnable examples.
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod faults;
pub mod load;
pub use axum_payments as payments;

/// The README's code blocks, compiled and run as doctests so the README stays true.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
