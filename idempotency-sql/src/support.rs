//! Building blocks for crates that keep their own tables beside the stores' (such as the
//! transactional outbox of `idempotency-outbox`): versioned migrations under the stores'
//! migration lock and schema table, and SQL parameters written as the stores write them.

pub use crate::archive::write_json_lines;
pub use crate::common::{RowsAffected, micros, unix_micros};
#[cfg(feature = "mysql")]
pub use crate::mysql::migrate_table as migrate_mysql_table;
#[cfg(feature = "postgres")]
pub use crate::postgres::migrate_table as migrate_postgres_table;
pub use crate::schema::Steps;
#[cfg(feature = "sqlite")]
pub use crate::sqlite::migrate_table as migrate_sqlite_table;
