//! SQL stores (sqlx): PostgreSQL, SQLite, MySQL/MariaDB; transactional dedup and state machines.
