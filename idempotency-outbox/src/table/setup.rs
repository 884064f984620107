//! Setting an outbox up alike on every database: another table name, the migration, the
//! partial indexes where the database has them, and the values every enqueue binds first.

use sqlx::{Arguments, Database, Encode, Type};

use super::shared::codec;
use super::{Outbox, OutboxDatabase, OutboxMessage, checked_table};
use idempotency_core::StoreError;

impl<DB: OutboxDatabase> Outbox<DB> {
    /// The same outbox in the table `table` (a plain identifier; on PostgreSQL also the
    /// `LISTEN` channel).
    pub fn with_table_name(self, table: &str) -> Result<Self, StoreError> {
        checked_table(table)?;
        let renamed = Self::with_sql(self.pool, DB::statements(table));
        // Whether the server skips locked rows, where it is learnt (MySQL) rather than known.
        if let Some(skips) = self.sql.skip_locked.get() {
            let _ = renamed.sql.skip_locked.set(*skips);
        }
        Ok(renamed)
    }

    /// Creates the table or brings it to this release's schema (versioned like record tables,
    /// serialized against concurrent migrations as the database's record stores do: an advisory
    /// lock, a named lock, `BEGIN IMMEDIATE`; quiet when up to date).
    pub async fn migrate(&self) -> Result<(), StoreError> {
        DB::migrate_table(&self.pool, &self.sql.table, &self.sql.steps).await
    }
}

/// The first schema step of the outbox table `t` where the database has partial indexes
/// (PostgreSQL, SQLite): `create`, then the indexes of due pending messages, of unsent messages
/// of an aggregate, of sent messages by age.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) fn with_partial_indexes(create: String, t: &str) -> Vec<String> {
    vec![
        create,
        format!(
            "CREATE INDEX IF NOT EXISTS \"{t}_due\" ON \"{t}\" (available_at, seq) \
             WHERE state = 'pending'"
        ),
        format!(
            "CREATE INDEX IF NOT EXISTS \"{t}_aggregate\" ON \"{t}\" (aggregate, seq) \
             WHERE aggregate IS NOT NULL AND state <> 'sent'"
        ),
        format!(
            "CREATE INDEX IF NOT EXISTS \"{t}_sent\" ON \"{t}\" (sent_at) WHERE state = 'sent'"
        ),
    ]
}

/// The values an enqueue binds first, in every database's `enqueue`: id, topic, business key,
/// aggregate, payload.
pub(crate) fn message_arguments<'q, DB: Database>(
    message: &'q OutboxMessage,
) -> Result<DB::Arguments<'q>, StoreError>
where
    &'q str: Encode<'q, DB> + Type<DB>,
    Option<&'q str>: Encode<'q, DB> + Type<DB>,
    &'q [u8]: Encode<'q, DB> + Type<DB>,
{
    let mut args = DB::Arguments::default();
    args.add(message.id.as_str()).map_err(codec)?;
    args.add(message.topic.as_str()).map_err(codec)?;
    args.add(message.key.as_str()).map_err(codec)?;
    args.add(message.aggregate.as_deref()).map_err(codec)?;
    args.add(message.payload.as_slice()).map_err(codec)?;
    Ok(args)
}
