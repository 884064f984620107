//! Idempotency engine for microservices: a repeated request produces the same result.
//!
//! Duplicates cannot be removed (gateway retries, double clicks, at-least-once queues, RPC
//! timeout retries), only made harmless. This crate holds the pieces every front end shares:
//!
//! - [`IdempotencyKey`]: a validated client key (1–255 visible ASCII characters).
//! - [`Scope`] and [`StorageKey`]: keys are scoped by namespace and principal, then hashed, so one
//!   tenant can never read another's record and raw keys are never stored.
//! - [`Fingerprint`]: what the key was first used with; the same key with another payload is refused.
//! - [`Store`]: the fenced record lifecycle `absent → in_progress → completed`, written once per
//!   backend and checked by the shared conformance suite (crate `idempotency-test`).
//! - [`Idempotency`]: the engine that claims a key, keeps the lease alive while work runs, and
//!   stores or releases the outcome.
//!
//! What operators do with records on every store (list and count dangling records, inspect,
//! reconcile, release or complete by hand, purge with an archive) is in `idempotency-operations`.
//!
//! # Glossary
//!
//! Every crate of the workspace uses these words, and only in these senses.
//!
//! - **key**: what names one operation (a client's `Idempotency-Key`, a trade number, a message
//!   id). A [`Scope`] (namespace + principal) and a [`Mechanism`] turn it into the
//!   **storage key**, a digest: stores never see raw keys.
//! - **duplicate**: a request or message whose key came before (a retry, a double click, a
//!   redelivery). It is answered by a **replay**, waits while the first is **in flight**, or is
//!   a **conflict** (the key with another payload: a **mismatch**, which the callback preset and
//!   consumers answer with the stored outcome, marking the record).
//! - **record**: what a store keeps per storage key: in progress (claimed) or completed.
//! - **claim**: taking a key for one execution ([`Store::claim`], [`Idempotency::claim`]). The
//!   store answers with what it found ([`Claim`]: acquired, in progress, completed, mismatch);
//!   the engine turns that into the caller's [`Decision`].
//! - **lease**: how long a claim holds before another caller may take it over (a crashed
//!   owner's key is not lost); renewed while the work runs (**keep-alive**).
//! - **fencing token**: issued by the store with each claim, strictly greater for every new
//!   owner; completes, releases and renewals carry it, so a stale owner changes nothing.
//! - **outcome**: what an execution produced (a status and a body), stored by **complete** and
//!   answered to duplicates.
//! - **decision**: what a caller does with a claim: **execute** (run the work, then complete or
//!   release), **replay** (answer with the stored outcome, run nothing), **in flight** (the first
//!   owner is still running: answer at once or wait, by [`InFlightPolicy`]), **mismatch** (the
//!   key was used with another payload, told by its [`Fingerprint`]). `idempotency_sql::TxClaim` is the
//!   same decision inside a database transaction.
//! - **release**: deleting an in-progress record so that a retry runs the work again (a failed
//!   handler, an outcome not worth keeping). **Undo** is the release of a claim whose answer
//!   never came, named by its [`ClaimId`].
//! - **takeover**: a claim of a key whose lease ended; its owner is attempt `n + 1`.
//! - **step** (runs with steps, crate `idempotency-steps`): one named part of a handler with
//!   several (reserve, capture, grant). A **local** step writes to the business database and
//!   **checkpoints** its result with the record in its own transaction; a **foreign** step calls
//!   another service with a **downstream key** ([`StorageKey::downstream`]) and checkpoints its
//!   answer just after. The record's [`Progress`] lets a retry, a takeover or the
//!   **completer** (which drives runs nobody retries) **resume** after the last completed step.
//!   A step may **end** the run with an answer; the local steps before it are then
//!   **compensated** (undone, last first).
//! - **settle** (queue consumers only): ack, requeue or reject a delivery, by its verdict.
//! - **abandoned**: an in-progress record whose lease ended (its owner crashed or hangs): a
//!   **dangling** record until a claim takes it over or an operator releases it
//!   (`idempotency_operations::Status::Abandoned`).
//! - **fence** (operations): the record as an operator listed it (its fencing token and last
//!   write); an operator's release, complete or delete applies only while the record is still
//!   that one (`idempotency_operations::Fence`).
//! - **audit**: the entry every operator action leaves: who, why, when, what, the record as it
//!   was (`idempotency_operations::AuditLog`).
//! - **purge**: deleting expired records (completed past their TTL, abandoned past the grace)
//!   in bounded batches; an **archive** is the copy a purge makes first (a table, or JSON
//!   lines), opt-in since stored bodies may be personal data.
//! - **outbox**: a table of messages to other services, written in the same transaction as the
//!   business change (`idempotency_outbox::Outbox`), so a message exists exactly when its change committed.
//!   **Enqueue** adds one; its **message id** is derived from the scope and the business key, so
//!   one business event always carries one id (the receiver's key).
//! - **relay**: the process that delivers committed outbox messages at least once to a
//!   **target** (a broker or an HTTP endpoint) and marks them **sent**; it claims a batch for a
//!   lease, like a record's, so a relay that dies is replaced. A message refused too often is
//!   **dead**: kept for an operator, never dropped.
//!
//! ```
//! use idempotency_core::{Decision, Fingerprint, Idempotency, IdempotencyKey, InFlightPolicy, MemoryStore, Outcome, Scope};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let engine = Idempotency::new(MemoryStore::new());
//! let scope = Scope::new("payments.callback");
//! let key = IdempotencyKey::parse("T1")?;
//! let fingerprint = Fingerprint::of_bytes(b"order 42");
//!
//! match engine.claim(&scope, &key, &fingerprint, InFlightPolicy::Reject).await? {
//!     Decision::Execute(execution) => {
//!         // ... grant the coupon exactly once ...
//!         execution.complete(Outcome::new(200, "granted")).await?;
//!     }
//!     Decision::Replay(outcome) => println!("duplicate: {:?}", outcome.body),
//!     Decision::InFlight { retry_after } => println!("busy, retry in {retry_after:?}"),
//!     Decision::Mismatch => println!("same key, other payload"),
//! }
//! # Ok(()) }
//! ```
//!
//! # Telemetry
//!
//! Counters and gauges are in [`metrics`]. The engine's `tracing` events name their fields
//! alike: `namespace`; `key`, the storage key in hex (no event carries a raw key); `decision`
//! on each claim (`execute`, `takeover`, `replay`, `in_flight`, `mismatch`, as the `decision`
//! label of [`metrics::DECISIONS`]), with `attempt` and `fencing_token` when it executes and
//! `status` when it replays; store failures add `op` and `error`. Operator actions are events
//! of the target `idempotency_operations::AUDIT_TARGET`. The spans of guarded operations and operator
//! actions, with OpenTelemetry-style attribute names (`idempotency.namespace`,
//! `idempotency.decision`, `idempotency.key_hash`, `error.type`, …), are listed in
//! [`telemetry`].
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod background;
mod completed_keys;
mod derivation;
mod engine;
mod error;
mod fingerprint;
mod framing;
mod in_flight;
mod key;
mod mechanism;
pub mod metrics;
mod namespace;
mod progress;
mod record;
mod scope;
mod store;
mod sweeper;
pub mod telemetry;

#[cfg(feature = "memory")]
mod memory;

pub use completed_keys::CompletedKeys;
pub use engine::{
    Config, DEFAULT_IN_FLIGHT_POLL, DEFAULT_MAX_WAITERS_PER_KEY, Decision, Execution, Idempotency,
};
pub use error::{Cause, Error, StoreError};
pub use fingerprint::{Fingerprint, FingerprintBuilder, canonical_json};
pub use in_flight::{DEFAULT_IN_FLIGHT_WAIT, InFlightPolicy};
pub use key::{IdempotencyKey, KeyError, MAX_KEY_LEN};
pub use mechanism::Mechanism;
pub use namespace::Namespace;
pub use progress::{Ending, Progress, StepResult};
pub use record::{ClaimId, FencingToken, Outcome, Record, RecordState};
pub use scope::{ClaimKey, Scope, StorageKey};
pub use store::{
    BoxFuture, BoxStore, Claim, ClaimRequest, CompleteRequest, DEFAULT_ABANDONED_GRACE, DynStore,
    Lease, Store, TouchRequest,
};
pub use sweeper::{Sweeper, spawn_sweeper};

#[cfg(feature = "memory")]
pub use memory::{DEFAULT_MEMORY_MAX_BYTES, DEFAULT_MEMORY_MAX_RECORDS, MemoryStore};
