//! The rows the outbox reads messages from, by column name: one [`MessageRow`] of a message's
//! columns, which a claim, a dead listing and an archiving purge each follow with their own.

use std::time::{Duration, SystemTime};

use base64::Engine;

use super::{ArchivedMessage, Claimed, DeadMessage, OutboxMessage, attempts};

/// The columns of a message, as [`MessageRow`] reads them.
pub(crate) const COLUMNS: &str = "seq, id, topic, business_key, aggregate, payload, attempts";

/// A message's columns ([`COLUMNS`]).
#[derive(sqlx::FromRow)]
pub(crate) struct MessageRow {
    seq: i64,
    id: String,
    topic: String,
    business_key: String,
    aggregate: Option<String>,
    payload: Vec<u8>,
    attempts: i64,
}

impl MessageRow {
    /// The message of the row.
    fn message(self) -> OutboxMessage {
        OutboxMessage {
            id: self.id,
            topic: self.topic,
            key: self.business_key,
            aggregate: self.aggregate,
            payload: self.payload,
        }
    }
}

/// A claimed message's row: [`COLUMNS`], then `age_us`, its age in microseconds (each database
/// computes it by its own clock, as it wrote `created_at`).
#[derive(sqlx::FromRow)]
pub(crate) struct ClaimedRow {
    #[sqlx(flatten)]
    row: MessageRow,
    age_us: i64,
}

/// The messages of claimed rows, in enqueue order (`RETURNING` keeps no order).
pub(crate) fn claimed(rows: Vec<ClaimedRow>, claim: i64) -> Vec<Claimed> {
    let mut claimed: Vec<Claimed> = rows
        .into_iter()
        .map(|ClaimedRow { row, age_us }| Claimed {
            seq: row.seq,
            claim,
            attempts: attempts(row.attempts),
            age: Duration::from_micros(u64::try_from(age_us).unwrap_or(0)),
            message: row.message(),
        })
        .collect();
    claimed.sort_by_key(|claimed| claimed.seq);
    claimed
}

/// A dead message's row: [`COLUMNS`] and `last_error`.
#[derive(sqlx::FromRow)]
pub(crate) struct DeadRow {
    #[sqlx(flatten)]
    row: MessageRow,
    last_error: Option<String>,
}

impl DeadRow {
    /// The dead message of the row.
    pub(crate) fn dead(self) -> DeadMessage {
        DeadMessage {
            seq: self.row.seq,
            attempts: attempts(self.row.attempts),
            last_error: self.last_error,
            message: self.row.message(),
        }
    }
}

/// An archived row as `purge_read` selects it: [`COLUMNS`], then `created_us` and `sent_us`
/// (Unix microseconds).
#[derive(sqlx::FromRow)]
pub(crate) struct ArchivedRow {
    #[sqlx(flatten)]
    row: MessageRow,
    created_us: i64,
    sent_us: Option<i64>,
}

impl ArchivedRow {
    /// The archived form of the row, read at `now`.
    pub(crate) fn archived(self, now: SystemTime) -> ArchivedMessage {
        let millis = |micros: i64| u64::try_from(micros.max(0) / 1000).unwrap_or(0);
        let row = self.row;
        ArchivedMessage {
            seq: row.seq,
            id: row.id,
            topic: row.topic,
            business_key: row.business_key,
            aggregate: row.aggregate,
            payload_base64: base64::engine::general_purpose::STANDARD.encode(row.payload),
            attempts: attempts(row.attempts),
            created_at_ms: millis(self.created_us),
            sent_at_ms: self.sent_us.map(millis),
            archived_at_ms: unix_millis(now),
        }
    }
}

/// Milliseconds since the Unix epoch (saturating, never panics; 0 before it).
fn unix_millis(at: SystemTime) -> u64 {
    at.duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
