//! Runs with steps on any core store that keeps checkpoints
//! ([`Store::checkpoint`](idempotency_core::Store::checkpoint): Redis, Redis Cluster, Valkey,
//! the memory store), where the steps are not in a business database: every step is
//! **foreign** (a call to another service with its downstream key), checkpointed on the run's
//! record as soon as it returns, and the owner keeps the run by its **lease**.
//!
//! The same run as on a SQL store ([`crate::Runner`], [`crate::Run`]), with what each store
//! can guarantee:
//!
//! | | SQL runner ([`crate::Runner`]) | leased runner ([`Runner`]) |
//! |---|---|---|
//! | stores | PostgreSQL, MySQL/MariaDB, SQLite | any core `Store` with checkpoints: Redis (and Cluster, Valkey), memory |
//! | local steps (writes and checkpoint in one transaction) | [`crate::Run::local`] | none: no business database |
//! | foreign steps | [`crate::Run::foreign`], checkpointed with the next step's transaction | [`Run::foreign`], checkpointed alone as it returns (one round trip) |
//! | a dead owner is noticed | at once, its hold ends with its connection (SQLite: its lease) | when its lease ends |
//! | a live owner keeps its run | its hold | its lease, renewed by each checkpoint and a heartbeat every third of the lease while a step runs |
//! | compensations ([`StepError::End`](crate::StepError::End)) | local, each in a transaction with its checkpoint | foreign, each with its own downstream key, then checkpointed |
//! | duplicates of a live run | wait on the database's lock, or in flight | wait for the store's wake-up (polling at most every 100 ms), or in flight |
//! | completer's source | the store ([`crate::RunSource`]) | [`Abandoned`]: the store's record scan |
//! | front ends | functions, HTTP and gRPC (`build_steps`), queues (`StepsHandler::new`) | functions, HTTP and gRPC (`build_leased_steps`, `Steps<Leased<S>>`), queues (`StepsHandler::leased`) |
//!
//! | per leased run on Redis | round trips (counted in `tests/leased_round_trips.rs`) |
//! |---|---|
//! | start of a new run | 1: the claim's `SET … NX GET` |
//! | a step | the call, then 1 checkpoint script |
//! | a step completed before | none |
//! | while a step runs | 1 heartbeat script every third of the lease |
//! | pause, or the answer | 1 script |
//! | resume of a paused or dead owner's run | 3: the claim, the takeover script, the checkpoints read (`MGET`) |
//!
//! Each step runs **at least once**: a crash after a step returned and before its checkpoint
//! landed (or a lost checkpoint: a Redis failover, an `appendfsync` window) calls it again on
//! resume, with the same downstream key, so the other service must deduplicate on that key.
//! A step whose checkpoint landed never runs again for the run. An owner taken over (its lease
//! ended while it was stalled) is fenced out: its next checkpoint fails with
//! [`Error::LeaseLost`](idempotency_core::Error::LeaseLost) and its step's result is not kept.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use idempotency_core::{IdempotencyKey, MemoryStore, Scope};
//! use idempotency_steps::leased::Runner;
//!
//! let runner = Runner::new(MemoryStore::new());
//! let scope = Scope::new("checkout");
//! let key = IdempotencyKey::parse("K1")?;
//! let receipt: String = runner
//!     .call(&scope, &key, 7u32, async |run, order: u32| {
//!         let capture: String = run
//!             .foreign("capture", async |key| Ok(format!("captured {order} with {key}")))
//!             .await?;
//!         Ok(capture)
//!     })
//!     .await?;
//! // Called again with the key: the stored result, nothing run.
//! let again: String = runner
//!     .call(&scope, &key, 7u32, async |_, _| unreachable!("completed before"))
//!     .await?;
//! assert_eq!(receipt, again);
//! # Ok(()) }
//! ```

use std::marker::PhantomData;

mod abandoned;
mod call;
mod run;
mod runner;

/// Names, in a front end's types, the leased runs on the core store `S`: the tower layer's
/// `Steps<Leased<RedisStore>>` (built with `build_leased_steps`) derefs to [`Run`], and the
/// queue's `StepsHandler<Leased<RedisStore>>` runs each message with a [`Runner`]. Never built:
/// a name, not a value.
pub struct Leased<S>(PhantomData<fn() -> S>);

impl<S> std::fmt::Debug for Leased<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Leased")
    }
}

pub use abandoned::{Abandoned, DEFAULT_SCAN_LIMIT};
pub use run::{Run, Undo};
pub use runner::{Runner, Started};
