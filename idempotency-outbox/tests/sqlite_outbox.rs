//! The outbox table on a real SQLite (a database file per test): enqueue in the business transaction,
//! claims (one writer at a time, leases, fencing, ordering per aggregate), dead and revive, purging. No
//! broker involved.
#![cfg(feature = "sqlite")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use idempotency_outbox::Outbox;
use sqlx::Sqlite;

support::table::table_suite!(Outbox<Sqlite>);
