//! The benchmark and fault harnesses around the payments example (`examples/axum-payments`):
//! [`load`] drives a served service (the `loadgen` and `callback_bench` binaries), [`faults`]
//! runs the HTTP layer over a store whose link or server fails (`fault_harness`,
//! `tests/faults_at_the_wire.rs`); `queue_bench` measures the queue consumers; [`wire`] counts
//! what a store's client sends (`waiters`, `steps`). Not an example to copy: the examples are
//! the packages under `examples/`.
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod faults;
pub mod load;
pub mod wire;
