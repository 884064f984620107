//! SQL stores (sqlx): PostgreSQL, SQLite, MySQL/MariaDB; transactional dedup and state machines.
//!
//! - `PostgresStore`, `SqliteStore`, `MySqlStore` (features `postgres`, `sqlite`, `mysql`):
//!   [`SqlStore`] on each [`Dialect`], a [`Store`](crate::Store) that passes the shared
//!   conformance suite, with `new(pool)`, `with_table_name(..)`, `migrate()` (DDL issued from
//!   code, no compile-time database), `purge_expired(limit)` in bounded batches and
//!   [`ListFilter`]-based `list` for reconciliation. Run [`crate::spawn_sweeper`] for
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
//! - [`Outbox`] ([`outbox`]): messages to other services enqueued in the same transaction as
//!   the business change, delivered at least once by a relay (crate `idempotency-outbox`) with
//!   a stable id the receiver dedups on: what crosses databases, where a dedup record cannot.
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

mod audit;
mod common;
mod conflicts;
mod dialect;
mod operations;
pub mod outbox;
mod schema;
mod store;
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
pub use dialect::Dialect;
pub use outbox::{Outbox, OutboxMessage, OutboxTable};
pub use schema::{SCHEMA_TABLE, SCHEMA_VERSION};
pub use store::SqlStore;
pub use transition::{StateValue, Transition, TransitionOutcome};
pub use tx::{InTransaction, TxClaim, TxClaimRequest, TxLease, TxStore};

pub(crate) use common::map_err;

#[cfg(feature = "mysql")]
pub use mysql::MySqlStore;
#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;
