//! One message by its id, for operators: where a business event's message stands.

use idempotency_core::StoreError;
use idempotency_sql::from_sqlx as map_err;

use super::{MessageStatus, Outbox, attempts};

/// The row `find` reads.
type StatusRow = (String, String, i64, Option<String>);

macro_rules! find {
    ($database:ty, $feature:literal, $quote:literal, $placeholder:literal) => {
        #[cfg(feature = $feature)]
        impl Outbox<$database> {
            /// The message `id` (a derived message id, [`message_id`](super::message_id)), if
            /// the table still holds it: a message sent and purged past the relay's retention
            /// is `None`, as is one never enqueued.
            pub async fn find(&self, id: &str) -> Result<Option<MessageStatus>, StoreError> {
                let t = &self.sql.table;
                let sql = format!(
                    "SELECT state, topic, attempts, last_error FROM {q}{t}{q} WHERE id = {p}",
                    q = $quote,
                    p = $placeholder,
                );
                let row: Option<StatusRow> = sqlx::query_as(&sql)
                    .bind(id)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(map_err)?;
                Ok(row.map(|(state, topic, tries, last_error)| MessageStatus {
                    state,
                    topic,
                    attempts: attempts(tries),
                    last_error,
                }))
            }
        }
    };
}

find!(sqlx::Postgres, "postgres", "\"", "$1");
find!(sqlx::MySql, "mysql", "`", "?");
find!(sqlx::Sqlite, "sqlite", "\"", "?1");
