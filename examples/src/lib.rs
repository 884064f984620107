//! Runnable examples.
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod payments;
