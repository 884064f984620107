//! Retry to completion: handlers with several **steps**, each checkpointed on the idempotency
//! record (in the business database, or on Redis or the memory store), so that a retry, a
//! takeover after a crash or the background [`Completer`] resumes after the last completed step
//! and never runs one twice.
//!
//! Two runners, one concept: a SQL store runs local and foreign steps ([`Runner`], [`Run`],
//! feature `sql`, on by default); any core store that keeps checkpoints (Redis, Redis Cluster,
//! Valkey, the memory store) runs foreign steps under a lease ([`leased::Runner`],
//! [`leased::Run`]; the table in [`leased`] sets the two side by side). A Redis-only service
//! builds this crate with `default-features = false`: no sqlx.
//!
//! A payment handler marks the order, captures the money at a provider, grants a coupon, then
//! answers. As one unit, a crash after the capture leaves the retry two bad choices: capture
//! again, or replay a failure forever. As a [`Run`] of steps:
//!
//! - a **local** step ([`Run::local`]) writes in its own transaction, and its result is
//!   checkpointed in that transaction: its writes and its checkpoint commit together (the
//!   iron rule, per step), when the next step starts or with the run's answer;
//! - a **foreign** step ([`Run::foreign`]) calls another service outside any transaction with
//!   a **downstream key** derived from the record's key and the step, so the other service
//!   deduplicates a call made again after a crash; its answer is checkpointed with the next
//!   step's transaction;
//! - a step may **end** the run with an answer ([`StepError::End`]: a declined card); the
//!   declared compensations ([`Run::undo`]) of the completed steps run, last first, each
//!   checkpointed, before the answer is stored; a step that may succeed later
//!   ([`StepError::Retry`]) leaves the run resumable ([`Run::pause`]);
//! - the owner **holds** the run's key on its connection for the whole run: on PostgreSQL and
//!   MySQL the database drops the hold with a dead process's connection, so a retry takes the
//!   run over at once, while a live owner's duplicates wait or are told it is in flight.
//!
//! | per run (PostgreSQL; MySQL) | statements |
//! |---|---|
//! | start: hold + claim of a new key | 1; 4 (a resume reads the record once more) |
//! | local step | `BEGIN`, the step's own, 1 checkpoint, `COMMIT` |
//! | foreign step | the call; its checkpoint joins the next step's transaction |
//! | complete: the answer + give the hold back, in the last step's transaction | 1; 2 |
//!
//! # Front ends
//! Every front end runs on both runners: it is generic over [`RunStore`] (what a store's runs
//! are: a SQL store itself, or a core store named [`leased::Leased<S>`]), starts runs through
//! [`StepRunner`] and ends them through [`OwnedRun`].
//!
//! | front end | SQL store (PostgreSQL, MySQL/MariaDB, SQLite) | core store (Redis, Cluster, Valkey, memory) |
//! |---|---|---|
//! | functions | [`Runner::call`], [`Runner::resume`] | [`leased::Runner::call`], [`leased::Runner::resume`] |
//! | HTTP and gRPC (axum, tonic: crate `idempotency-tower`) | `build_steps`, handlers take `Steps<PostgresStore>` | `build_leased_steps`, handlers take `Steps<Leased<RedisStore>>` |
//! | queue consumers (crate `idempotency-queue`) | `StepsHandler::new` | `StepsHandler::leased` |
//! | completer | [`Completer::new(store, ..)`](Completer::new) | [`Completer::new(Abandoned::new(store), ..)`](Completer::new) ([`leased::Abandoned`]) |
//! | any other front end | [`run_once`] with a [`Runner`] | [`run_once`] with a [`leased::Runner`] |
//!
//! The tower layer keeps the request as the run's input, answers duplicates, and resumes runs
//! through the completer; the queue handler keeps the message.
//!
//! # Guarantees per store
//! - **PostgreSQL, MySQL/MariaDB**: a dead owner is noticed as soon as its connection closes.
//!   A live owner whose connection broke loses its hold; its next checkpoint is fenced out
//!   ([`Error::LeaseLost`](idempotency_core::Error::LeaseLost)) and rolls its step back.
//! - **SQLite**: one process holds its runs in memory; another process's dead run is taken over
//!   when its lease ends ([`DEFAULT_RUN_LEASE`], renewed by each checkpoint).
//! - **Redis (standalone, Cluster, Valkey) and the memory store** ([`leased`]): steps are
//!   foreign only, no local transactional step (no business database shares the checkpoint's
//!   commit). Each step runs **at least once**, with its downstream key, so the other service
//!   deduplicates a second call; its checkpoint is written (one round trip) as soon as it
//!   returns, and a step whose checkpoint landed never runs again. A dead owner is noticed
//!   when its lease ends (renewed by each checkpoint and, while a step runs, a heartbeat every
//!   third of the lease); a stalled owner taken over is fenced out
//!   ([`Error::LeaseLost`](idempotency_core::Error::LeaseLost)) at its next checkpoint. A Redis
//!   failover to a replica that missed the last checkpoint, or a restart within the
//!   `appendfsync` window, may lose that checkpoint: the step is then called again with the
//!   same key (a lost claim loses the whole record: the run starts again, every step with its
//!   same key; an owner whose record reverted is fenced out). The memory store keeps runs as
//!   long as its process: after a restart every key is new.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod answer;
#[cfg(feature = "sql")]
mod call;
mod checkpoints;
mod completer;
mod error;
mod front;
pub mod leased;
#[cfg(feature = "sql")]
mod run;
#[cfg(feature = "sql")]
mod runner;
mod start;
#[cfg(feature = "sql")]
mod tx;

pub use answer::{Answer, CallError, run_once};
pub use completer::{Completer, DEFAULT_COMPLETER_BATCH, DEFAULT_MAX_ATTEMPTS, RunSource, Sweep};
pub use error::StepError;
pub use front::{Found, OwnedRun, RunStore, StepRunner};
#[cfg(feature = "sql")]
pub use run::{Run, Undo};
#[cfg(feature = "sql")]
pub use runner::{Runner, Started};
pub use start::{DEFAULT_MAX_INPUT, DEFAULT_RUN_LEASE, DEFAULT_RUN_TTL, Start};
#[cfg(feature = "sql")]
pub use tx::{Connection, Db, StepTx};
