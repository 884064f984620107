//! SQL stores for [`idempotency_core`] over sqlx: PostgreSQL, SQLite, MySQL/MariaDB;
//! transactional dedup and state machines.
//!
//! - `PostgresStore`, `SqliteStore`, `MySqlStore` (features `postgres`, `sqlite`, `mysql`):
//!   [`SqlStore`] on each [`Dialect`], a [`Store`](idempotency_core::Store) that passes the shared
//!   conformance suite, with `new(pool)`, `with_table_name(..)`, `migrate()` (DDL issued from
//!   code, no compile-time database), `purge_expired(limit)` in bounded batches and
//!   [`ListFilter`]-based `list` for reconciliation. Run [`idempotency_core::spawn_sweeper`] for
//!   background purging. What differs per database (the claim statements, how a wait is
//!   bounded, the clock) lives in one file each; the rest is written once.
//! - [`TxStore`]: the dedup record claimed and completed **inside the caller's transaction**,
//!   so the record and the business writes commit or roll back together. This only holds when
//!   the record lives in the same database as the business tables: a dedup record in another
//!   database cannot be atomic with them (a crash between the two commits leaves a record
//!   without its effect, or an effect without its record).
//! - [`Transition`]: conditional state transitions on the application's own table
//!   (`UPDATE … SET state = to WHERE id = ? AND state = from`), telling *applied* from
//!   *already in target*, *illegal* and *not found*; run side effects only when applied.
//! - The transactional outbox's tables (crate `idempotency-outbox`, on top of this one):
//!   messages to other services enqueued in the same transaction as the business change,
//!   delivered at least once by a relay with a stable id the receiver dedups on: what crosses
//!   databases, where a dedup record cannot.
//!
//! | step | PostgreSQL | MySQL/MariaDB | SQLite |
//! |---|---|---|---|
//! | `claim`: replay, in flight, mismatch | 1 statement | 1 (a read, no lock) | 1 (a read) |
//! | `claim`: new key | 1 | 2 | 2 |
//! | `claim`: takeover of an expired lease | 1 | 3 | 2 |
//! | `complete`, `touch`, `release`, `get`, `purge_expired`, `mark_conflict` | 1 | 1 | 1 |
//! | transactional claim | 1 | 1 (new key) / 2 | 1 (new key) / 2 |
//! | `Transition` (with optional extra text columns) | 1 round trip | 1 (applied) / 2 | 1 (applied) / 2 |
//!
//! Times: PostgreSQL and MySQL compare leases and TTLs with the database clock
//! (`statement_timestamp()`, `UTC_TIMESTAMP(6)`), so application servers with skewed clocks
//! agree, and so do operations (purges, counts, listings: what is expired or abandoned, and
//! since when) whatever the operator's machine's clock says; SQLite is embedded and uses the
//! host clock (microseconds), read once per statement, for its store and its operations.
//!
//! ```
//! # #[cfg(feature = "sqlite")]
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use idempotency_core::{Decision, Fingerprint, Idempotency, IdempotencyKey, InFlightPolicy, Outcome, Scope};
//! use idempotency_sql::SqliteStore;
//!
//! let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
//! let store = SqliteStore::new(pool);
//! store.migrate().await?; // the record table, at the latest schema version
//! let engine = Idempotency::new(store);
//! let (scope, key) = (Scope::new("payments"), IdempotencyKey::parse("T1")?);
//! let fingerprint = Fingerprint::of_bytes(b"{\"amount\":100}");
//! let Decision::Execute(execution) = engine.claim(&scope, &key, &fingerprint, InFlightPolicy::Reject).await? else {
//!     panic!("a new key runs");
//! };
//! execution.complete(Outcome::new(200, b"paid".to_vec())).await?;
//! let again = engine.claim(&scope, &key, &fingerprint, InFlightPolicy::Reject).await?;
//! assert!(matches!(again, Decision::Replay(outcome) if &outcome.body[..] == b"paid"));
//! # Ok(()) }
//! # #[cfg(not(feature = "sqlite"))] fn main() {}
//! ```

// Without a database feature (as `idempotency-queue`'s `sql` feature builds it) the crate gives
// the traits without a backend: the backends' shared helpers are then unused.
#![cfg_attr(
    not(any(feature = "postgres", feature = "mysql", feature = "sqlite")),
    allow(dead_code, unused_macros, unused_imports)
)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod archive;
mod audit;
mod common;
mod conflicts;
mod derivation;
mod dialect;
mod error;
pub mod function;
mod operations;
mod prefix;
mod schema;
mod steps;
mod store;
pub mod support;
mod time;
mod transition;
pub(crate) mod tx;

#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

pub use audit::{SqlAudit, audit_table_for};
pub use common::{ListFilter, validate_identifier};
pub use dialect::{Dialect, SqlStore};
pub use error::from_sqlx;
pub use schema::{SCHEMA_TABLE, SCHEMA_VERSION};
pub use steps::StepStore;
pub use transition::{StateValue, Transition, TransitionOutcome};
pub use tx::{InTransaction, TxClaim, TxClaimRequest, TxLease, TxStore};

#[cfg(feature = "mysql")]
pub use mysql::MySqlStore;
#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;
