//! The rows a claim reads, and the claimed messages they make.

use std::time::Duration;

use super::{Claimed, OutboxMessage, attempts};

/// The columns a claim and a dead listing read, in [`Row`]'s order.
pub(crate) const COLUMNS: &str = "seq, id, topic, business_key, aggregate, payload, attempts";

/// A claimed message's row: [`COLUMNS`], then its age in microseconds (each database computes
/// it by its own clock, as it wrote `created_at`).
pub(crate) type Row = (
    i64,
    String,
    String,
    String,
    Option<String>,
    Vec<u8>,
    i64,
    i64,
);

/// The messages of claimed rows, in enqueue order (`RETURNING` keeps no order).
pub(crate) fn claimed(rows: Vec<Row>, claim: i64) -> Vec<Claimed> {
    let mut claimed: Vec<Claimed> = rows
        .into_iter()
        .map(
            |(seq, id, topic, key, aggregate, payload, tries, age)| Claimed {
                seq,
                claim,
                attempts: attempts(tries),
                age: Duration::from_micros(u64::try_from(age).unwrap_or(0)),
                message: OutboxMessage {
                    id,
                    topic,
                    key,
                    aggregate,
                    payload,
                },
            },
        )
        .collect();
    claimed.sort_by_key(|claimed| claimed.seq);
    claimed
}
