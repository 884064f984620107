//! What the statements every database runs alike are given: the clock expiry is judged by
//! ([`Clock`]), a purge batch's statements and bounds ([`PurgeSql`], [`PurgeBatch`]), the
//! values of complete, touch and purge in a dialect's order ([`Param`], [`Values`]), and how a
//! bound parameter is appended to a statement ([`push_bind`]).

use std::time::Duration;

use idempotency_core::{StorageKey, StoreError};
use sqlx::{Arguments, Database, Encode, Type};

use crate::common::unix_micros;

/// The statements of a purge batch, as the dialect writes them.
#[derive(Clone, Copy)]
pub struct PurgeSql<'a> {
    /// The record table's `select_records`.
    pub select: &'a str,
    /// The record table (unquoted).
    pub table: &'a str,
    /// How identifiers are quoted.
    pub quote: (&'static str, &'static str),
    /// [`Steps::LOCK_ROWS`](super::Steps::LOCK_ROWS).
    pub lock: &'static str,
    /// [`Steps::NOW`](super::Steps::NOW).
    pub now: &'static str,
    /// [`Steps::BEGIN`](super::Steps::BEGIN).
    pub begin: Option<&'static str>,
    /// The clock expiry is judged by.
    pub clock: Clock,
}

/// The clock a purge, a count or a listing judges expiry by: the database's
/// ([`Steps::CLOCK_MINUS`](super::Steps::CLOCK_MINUS)), or the host's.
#[derive(Clone, Copy)]
pub struct Clock {
    /// [`Steps::CLOCK_MINUS`](super::Steps::CLOCK_MINUS).
    pub minus: Option<(&'static str, &'static str)>,
    /// [`Steps::NOW`](super::Steps::NOW).
    pub now: &'static str,
    /// [`Steps::MICROS`](super::Steps::MICROS).
    pub micros: (&'static str, &'static str),
    /// [`Steps::LIST_TIME`](super::Steps::LIST_TIME).
    pub time: (&'static str, &'static str),
    /// The host's time, read once for the operation (used where `minus` is `None`).
    pub host_now: std::time::SystemTime,
}

impl Clock {
    /// Appends "now minus `micros`" by this clock, in the type of the time columns.
    pub(super) fn push_minus<DB: Database>(
        &self,
        sql: &mut String,
        args: &mut DB::Arguments<'_>,
        micros: i64,
    ) -> Result<(), StoreError>
    where
        i64: for<'q> Encode<'q, DB> + Type<DB>,
    {
        match self.minus {
            Some((before, after)) => push_bind(sql, args, before, micros, after),
            None => {
                let at = unix_micros(self.host_now).saturating_sub(micros);
                push_bind(sql, args, self.time.0, at, self.time.1)
            }
        }
    }

    /// A query of the database's time now in Unix microseconds, where it keeps the clock
    /// (twice: the row type every dialect decodes, as a count's).
    pub(super) fn now_sql(&self) -> Option<String> {
        self.minus.map(|_| {
            let now = format!("{}{}{}", self.micros.0, self.now, self.micros.1);
            format!("SELECT {now}, {now}")
        })
    }
}

/// The order a listing returns records in, and where it starts.
#[derive(Clone, Copy, Debug)]
pub enum Order<'a> {
    /// Oldest `updated_at` first (reconciliation's `list`).
    Updated,
    /// By storage key, after this one if given: one page of an operations scan.
    KeysAfter(Option<&'a StorageKey>),
}

/// Which records one purge batch takes.
#[derive(Clone, Copy)]
pub struct PurgeBatch<'a> {
    /// Only this namespace.
    pub namespace: Option<&'a str>,
    /// After this storage key (the previous batch's last).
    pub after: Option<&'a StorageKey>,
    /// At most this many.
    pub limit: usize,
    /// When the host archived the batch (JSON lines' `archived_at`); expiry is judged by
    /// [`PurgeSql::clock`].
    pub now: std::time::SystemTime,
    /// The store's abandoned grace.
    pub grace: Duration,
    /// The TTL the table is configured with: younger records (by their last write) stay.
    pub floor: Duration,
}

/// A value that `complete`, `touch` or `purge` binds: each dialect lists them in the order of
/// its statement's placeholders ([`Steps::COMPLETE`](super::Steps::COMPLETE) and the like).
#[derive(Clone, Copy, Debug)]
pub enum Param {
    /// The storage key.
    Key,
    /// The fencing token.
    Token,
    /// The outcome's status.
    Status,
    /// The outcome's body.
    Body,
    /// The record TTL or the lease, in microseconds.
    Span,
    /// The host's time now in Unix microseconds, read as the statement is bound (SQLite).
    HostNow,
    /// The most records a purge deletes.
    Limit,
    /// The abandoned grace in microseconds.
    Grace,
    /// The table's configured TTL in microseconds: younger records stay.
    Floor,
}

/// The values of one `complete`, `touch` or `purge`, bound in a dialect's [`Param`] order
/// (those a statement does not take stay at their default).
#[derive(Clone, Copy, Default)]
pub struct Values<'a> {
    /// [`Param::Key`].
    pub key: &'a [u8],
    /// [`Param::Token`].
    pub token: i64,
    /// [`Param::Status`].
    pub status: i32,
    /// [`Param::Body`].
    pub body: &'a [u8],
    /// [`Param::Span`].
    pub span: i64,
    /// [`Param::Limit`].
    pub limit: i64,
    /// [`Param::Grace`].
    pub grace: i64,
    /// [`Param::Floor`].
    pub floor: i64,
}

/// Appends `before`, a placeholder for `value` (bound in `args`) and `after` to `sql`.
pub(super) fn push_bind<'q, DB, T>(
    sql: &mut String,
    args: &mut DB::Arguments<'q>,
    before: &str,
    value: T,
    after: &str,
) -> Result<(), StoreError>
where
    DB: Database,
    T: 'q + Encode<'q, DB> + Type<DB>,
{
    sql.push_str(before);
    args.add(value)
        .map_err(|error| StoreError::Codec(error.to_string().into()))?;
    args.format_placeholder(sql)
        .map_err(|error| StoreError::Codec(error.to_string().into()))?;
    sql.push_str(after);
    Ok(())
}
