//! What the three SQL backends share: identifier validation, the row shape, error mapping.

use std::time::{Duration, SystemTime};

use bytes::Bytes;

pub(crate) use crate::error::from_sqlx as map_err;
use crate::time::from_unix_micros;
use idempotency_core::{
    Claim, FencingToken, Fingerprint, InFlightPolicy, Lease, Outcome, Record, RecordState,
    StorageKey, StoreError,
};

/// The default table of every SQL store.
pub(crate) const DEFAULT_TABLE: &str = "idempotency_records";

/// The longest accepted identifier: 63 (PostgreSQL's limit) minus room for index suffixes.
const MAX_IDENTIFIER: usize = 48;

/// Checks that `name` is a plain SQL identifier: an ASCII letter or `_`, then letters, digits
/// or `_`, at most 48 characters. Anything else (quotes, dots, spaces, `;`) is refused, so a
/// name can be spliced into SQL (always quoted as well).
pub fn validate_identifier(name: &str) -> Result<(), StoreError> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if first_ok && rest_ok && name.len() <= MAX_IDENTIFIER {
        Ok(())
    } else {
        Err(StoreError::Config(format!(
            "{name:?} is not a valid SQL identifier (letters, digits and _, not starting with a \
             digit, at most {MAX_IDENTIFIER} characters)"
        )))
    }
}

/// Settings every SQL store carries.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) table: String,
    pub(crate) tx_lease: Duration,
    pub(crate) tx_ttl: Duration,
    pub(crate) tx_in_flight: InFlightPolicy,
    pub(crate) previous_keys: bool,
    pub(crate) abandoned_grace: Duration,
    /// The TTL the table is configured with ([`SqlStore::with_table_ttl`](super::SqlStore::with_table_ttl)).
    pub(crate) table_ttl: Option<Duration>,
    /// Whether waiters are woken by the database (PostgreSQL's `LISTEN`/`NOTIFY`).
    pub(crate) wake_ups: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            table: DEFAULT_TABLE.to_owned(),
            tx_lease: Duration::from_secs(60),
            tx_ttl: Duration::from_secs(24 * 60 * 60),
            tx_in_flight: InFlightPolicy::wait(idempotency_core::DEFAULT_IN_FLIGHT_WAIT),
            previous_keys: false,
            abandoned_grace: idempotency_core::DEFAULT_ABANDONED_GRACE,
            table_ttl: None,
            wake_ups: true,
        }
    }
}

/// Which records a SQL store's `list` returns, for reconciliation: by namespace, state and a
/// range of `updated_at`, oldest first, at most `limit` (served by the
/// `(namespace, state, updated_at)` index).
///
/// ```
/// use idempotency_core::RecordState;
/// use idempotency_sql::ListFilter;
/// use std::time::{Duration, SystemTime};
///
/// let stuck = ListFilter::new(100)
///     .namespace("pay.callback")
///     .state(RecordState::InProgress)
///     .updated_before(SystemTime::now() - Duration::from_secs(600));
/// # let _ = stuck;
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListFilter {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only this state.
    pub state: Option<RecordState>,
    /// Only records written at or after this time.
    pub updated_from: Option<SystemTime>,
    /// Only records written before this time.
    pub updated_before: Option<SystemTime>,
    /// At most this many records.
    pub limit: usize,
}

impl ListFilter {
    /// Every record, at most `limit`.
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            ..Self::default()
        }
    }

    idempotency_operations::__record_filter_setters!();

    /// Only records in `state`.
    pub fn state(mut self, state: RecordState) -> Self {
        self.state = Some(state);
        self
    }

    pub(crate) fn limit_param(&self) -> i64 {
        i64::try_from(self.limit).unwrap_or(i64::MAX)
    }
}

/// Microseconds since the Unix epoch of a time, as a SQL parameter (saturating; 0 before it).
pub fn unix_micros(at: SystemTime) -> i64 {
    i64::try_from(crate::time::unix_micros(at)).unwrap_or(i64::MAX)
}

/// The longest abandoned grace a SQL store takes (ten years), so `now - grace` stays a valid
/// timestamp on every database.
const MAX_GRACE: Duration = Duration::from_secs(10 * 365 * 24 * 60 * 60);

impl Settings {
    /// Sets the abandoned grace, bounded by [`MAX_GRACE`].
    pub(crate) fn set_abandoned_grace(&mut self, grace: Duration) {
        self.abandoned_grace = grace.min(MAX_GRACE);
    }
}

/// Microseconds of a duration as a SQL parameter (saturating).
pub fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

/// The time of a SQL column of microseconds since the Unix epoch (the epoch if negative).
fn from_micros(micros: i64) -> SystemTime {
    from_unix_micros(u64::try_from(micros).unwrap_or(0))
}

fn to_u32(value: i64, what: &str) -> Result<u32, StoreError> {
    u32::try_from(value)
        .map_err(|_| StoreError::Codec(format!("{what} out of range: {value}").into()))
}

fn to_u64(value: i64, what: &str) -> Result<u64, StoreError> {
    u64::try_from(value)
        .map_err(|_| StoreError::Codec(format!("{what} out of range: {value}").into()))
}

fn digest(bytes: &[u8], what: &str) -> Result<[u8; 32], StoreError> {
    bytes
        .try_into()
        .map_err(|_| StoreError::Codec(format!("{what} is {} bytes, not 32", bytes.len()).into()))
}

fn state(text: &str) -> Result<RecordState, StoreError> {
    RecordState::parse(text)
        .ok_or_else(|| StoreError::Codec(format!("unknown state {text:?}").into()))
}

fn outcome(status: Option<i64>, body: Option<Vec<u8>>) -> Result<Option<Outcome>, StoreError> {
    match (status, body) {
        (Some(status), Some(body)) => Ok(Some(Outcome {
            status: u16::try_from(status)
                .map_err(|_| StoreError::Codec(format!("status out of range: {status}").into()))?,
            body: Bytes::from(body),
        })),
        _ => Ok(None),
    }
}

/// A whole record as every backend selects it (times as Unix microseconds).
#[derive(sqlx::FromRow)]
pub(crate) struct RecordRow {
    key_hash: Vec<u8>,
    namespace: String,
    fingerprint: Vec<u8>,
    state: String,
    token: i64,
    attempts: i64,
    created_us: i64,
    updated_us: i64,
    completed_us: Option<i64>,
    expires_us: i64,
    response_status: Option<i64>,
    response_body: Option<Vec<u8>>,
    conflicts: i64,
    last_conflict_us: Option<i64>,
    mechanism: Option<String>,
    key_derivation: Option<i64>,
    progress: Option<Vec<u8>>,
}

impl RecordRow {
    pub(crate) fn into_record(self) -> Result<Record, StoreError> {
        Ok(Record {
            key: StorageKey(digest(&self.key_hash, "key hash")?),
            namespace: self.namespace,
            fingerprint: Fingerprint(digest(&self.fingerprint, "fingerprint")?),
            state: state(&self.state)?,
            token: FencingToken::new(to_u64(self.token, "token")?),
            attempts: to_u32(self.attempts, "attempts")?,
            created_at: from_micros(self.created_us),
            updated_at: from_micros(self.updated_us),
            completed_at: self.completed_us.map(from_micros),
            expires_at: from_micros(self.expires_us),
            outcome: outcome(self.response_status, self.response_body)?,
            conflicts: to_u32(self.conflicts, "conflicts")?,
            last_conflict_at: self.last_conflict_us.map(from_micros),
            // A name or version this release does not know reads as unknown.
            mechanism: self
                .mechanism
                .as_deref()
                .and_then(idempotency_core::Mechanism::parse),
            key_derivation: self
                .key_derivation
                .and_then(|version| u8::try_from(version).ok()),
            progress: self
                .progress
                .as_deref()
                .map(idempotency_core::Progress::decode)
                .transpose()?,
        })
    }
}

/// What a claim statement returns: the row as it is after the statement, and whether this
/// caller took it.
#[derive(sqlx::FromRow)]
pub(crate) struct ClaimRow {
    #[sqlx(default)]
    pub(crate) acquired: bool,
    pub(crate) state: String,
    pub(crate) fingerprint: Vec<u8>,
    pub(crate) token: i64,
    pub(crate) attempts: i64,
    pub(crate) remaining_us: i64,
    pub(crate) response_status: Option<i64>,
    pub(crate) response_body: Option<Vec<u8>>,
}

impl ClaimRow {
    /// Interprets the row for a caller that asked with `fingerprint`.
    pub(crate) fn into_claim(self, fingerprint: &Fingerprint) -> Result<Claim, StoreError> {
        if self.acquired {
            return Ok(Claim::Acquired(Lease {
                token: FencingToken::new(to_u64(self.token, "token")?),
                attempt: to_u32(self.attempts, "attempts")?,
                // A takeover of an expired lease counts on from the crashed attempt; a fresh
                // record (absent, or completed and expired) starts again at 1.
                took_over: self.attempts > 1,
            }));
        }
        if self.fingerprint.as_slice() != fingerprint.0.as_slice() {
            return Ok(Claim::Mismatch);
        }
        match (
            state(&self.state)?,
            outcome(self.response_status, self.response_body)?,
        ) {
            (RecordState::Completed, Some(outcome)) => Ok(Claim::Completed(outcome)),
            _ => Ok(Claim::InProgress {
                lease_remaining: Duration::from_micros(
                    u64::try_from(self.remaining_us).unwrap_or(0),
                ),
            }),
        }
    }
}

/// The rows a statement wrote, as each database's driver reports them.
pub trait RowsAffected {
    /// Rows the statement wrote (on MySQL those it matched: sqlx connects with
    /// `CLIENT_FOUND_ROWS`).
    fn rows(&self) -> u64;
}

#[cfg(feature = "postgres")]
impl RowsAffected for sqlx::postgres::PgQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
}

#[cfg(feature = "mysql")]
impl RowsAffected for sqlx::mysql::MySqlQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
}

#[cfg(feature = "sqlite")]
impl RowsAffected for sqlx::sqlite::SqliteQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
}

/// A fencing token as a SQL parameter (tokens beyond `i64` were never issued: stale).
pub(crate) fn token_param(token: FencingToken) -> Result<i64, StoreError> {
    i64::try_from(token.get()).map_err(|_| StoreError::LeaseLost)
}

/// `Ok` if a fenced write hit its row, else [`StoreError::LeaseLost`].
pub(crate) fn owned(rows: u64) -> Result<(), StoreError> {
    if rows == 0 {
        Err(StoreError::LeaseLost)
    } else {
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn identifiers() {
        for good in ["idempotency_records", "_t", "T1", "a_b_c9"] {
            assert!(validate_identifier(good).is_ok(), "{good}");
        }
        let long = "a".repeat(49);
        for bad in [
            "",
            "1abc",
            "a b",
            "a;drop table x",
            "a\"b",
            "a`b",
            "public.t",
            "tä",
            "a-b",
            long.as_str(),
        ] {
            assert!(
                matches!(validate_identifier(bad), Err(StoreError::Config(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn micro_times_round_trip() {
        let at = from_micros(1_700_000_000_123_456);
        let back = at
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros())
            .unwrap_or(0);
        assert_eq!(back, 1_700_000_000_123_456);
    }
}
