//! The conflict mark of a SQL record ([`Store::mark_conflict`](idempotency_core::Store::mark_conflict)):
//! one `UPDATE` of two columns, `conflicts` and `last_conflict_at` (schema version 3).

use std::future::Future;

use sqlx::{Database, Encode, Executor, IntoArguments, Pool, Type};

use super::common::{RowsAffected, map_err};
use idempotency_core::{StorageKey, StoreError};

/// The two columns' definitions and the statement, per database.
pub(crate) struct MarkSql {
    /// The schema step adding the columns (`conflicts`, then `last_conflict_at`).
    pub(crate) step: Vec<String>,
    /// Counts one more conflict on a record, the last one now: key.
    pub(crate) mark: String,
}

impl MarkSql {
    /// The step and statement of table `t` (quoted): `add` adds a column (`ADD COLUMN`, or
    /// `ADD COLUMN IF NOT EXISTS` where the database has it), `time` is the type of the time
    /// columns, `now` the database's time now in that type, `param` the key's placeholder.
    pub(crate) fn new(t: &str, add: &str, time: &str, now: &str, param: &str) -> Self {
        Self {
            step: vec![
                format!("ALTER TABLE {t} {add} conflicts INTEGER NOT NULL DEFAULT 0"),
                format!("ALTER TABLE {t} {add} last_conflict_at {time} NULL"),
            ],
            mark: format!(
                "UPDATE {t} SET conflicts = conflicts + 1, last_conflict_at = {now} \
                 WHERE key_hash = {param}"
            ),
        }
    }
}

pub(crate) mod sealed {
    use super::*;

    /// Runs the mark statement.
    pub trait Mark: Database {
        /// Runs `sql` (which takes the key); whether it found the record.
        fn mark(
            pool: &Pool<Self>,
            sql: &str,
            key: &StorageKey,
        ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    }

    impl<DB> Mark for DB
    where
        DB: Database,
        for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
        for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
        for<'q> &'q [u8]: Encode<'q, DB> + Type<DB>,
        DB::QueryResult: RowsAffected,
    {
        async fn mark(pool: &Pool<Self>, sql: &str, key: &StorageKey) -> Result<bool, StoreError> {
            let done = sqlx::query(sql)
                .bind(key.0.as_slice())
                .execute(pool)
                .await
                .map_err(map_err)?;
            Ok(done.rows() > 0)
        }
    }
}
