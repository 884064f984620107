//! The packed record and the decoding of script replies.
//!
//! A record is one string (offsets from 0; integers big-endian):
//!
//! | bytes | field |
//! |---|---|
//! | 0 | state: `p` in progress, `c` completed |
//! | 1..33 | fingerprint (raw SHA-256) |
//! | 33..41 | fencing token |
//! | 41..45 | attempts |
//! | 45..53 | created, Unix ms |
//! | 53..61 | updated, Unix ms |
//! | 61..69 | in progress: lease end; completed: expiry (Unix ms) |
//! | 69..77 | completed at, Unix ms (0 while in progress) |
//! | 77..79 | outcome status |
//! | 79..81 | namespace length `n` |
//! | 81..81+n | namespace (UTF-8) |
//! | 81+n.. | outcome body, raw bytes |

use std::time::Duration;

use ::redis::Value;
use bytes::Bytes;

use crate::time::from_unix_millis;
use crate::{
    Claim, FencingToken, Fingerprint, Lease, Outcome, Record, RecordState, StorageKey, StoreError,
};

const HEADER: usize = 81;

fn codec(what: &str) -> StoreError {
    StoreError::Codec(format!("redis: unexpected {what}"))
}

fn int(value: &Value) -> Result<i64, StoreError> {
    match value {
        Value::Int(number) => Ok(*number),
        _ => Err(codec("reply type, expected a number")),
    }
}

fn unsigned<T: TryFrom<i64>>(value: &Value) -> Result<T, StoreError> {
    T::try_from(int(value)?).map_err(|_| codec("number out of range"))
}

fn be<const N: usize>(record: &[u8], at: usize) -> [u8; N] {
    let mut bytes = [0u8; N];
    bytes.copy_from_slice(&record[at..at + N]);
    bytes
}

fn u64_at(record: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(be(record, at))
}

fn u16_at(record: &[u8], at: usize) -> u16 {
    u16::from_be_bytes(be(record, at))
}

/// The namespace's end (= the body's start), after checking the record is long enough.
fn body_start(record: &[u8]) -> Result<usize, StoreError> {
    if record.len() < HEADER {
        return Err(codec("record length"));
    }
    let end = HEADER + usize::from(u16_at(record, 79));
    if record.len() < end {
        return Err(codec("record length"));
    }
    Ok(end)
}

/// The outcome of a completed record, without copying the body.
fn outcome(record: Vec<u8>) -> Result<Outcome, StoreError> {
    let start = body_start(&record)?;
    let status = u16_at(&record, 77);
    Ok(Outcome {
        status,
        body: Bytes::from(record).slice(start..),
    })
}

/// Decodes the claim script's reply (see `scripts::CLAIM`).
pub(super) fn claim_reply(reply: Value) -> Result<Claim, StoreError> {
    let Value::Array(mut items) = reply else {
        return Err(codec("claim reply"));
    };
    let tag = items.first().map(int).transpose()?;
    match (tag, items.len()) {
        (Some(1), 4) => Ok(Claim::Acquired(Lease {
            token: FencingToken(unsigned(&items[1])?),
            attempt: unsigned(&items[2])?,
            took_over: int(&items[3])? == 1,
        })),
        (Some(2), 2) => Ok(Claim::InProgress {
            lease_remaining: Duration::from_millis(unsigned(&items[1])?),
        }),
        (Some(3), 2) => match items.pop() {
            Some(Value::BulkString(record)) => Ok(Claim::Completed(outcome(record)?)),
            _ => Err(codec("stored record")),
        },
        (Some(4), 1) => Ok(Claim::Mismatch),
        _ => Err(codec("claim reply")),
    }
}

/// Encodes a fencing token as the script compares it (8 bytes, big-endian).
pub(super) fn token_bytes(token: FencingToken) -> [u8; 8] {
    token.0.to_be_bytes()
}

/// Decodes a stored record (`GET`); `None` is an absent key.
pub(super) fn record(
    key: &StorageKey,
    stored: Option<Vec<u8>>,
) -> Result<Option<Record>, StoreError> {
    let Some(stored) = stored else {
        return Ok(None);
    };
    let start = body_start(&stored)?;
    let state = match stored[0] {
        b'p' => RecordState::InProgress,
        b'c' => RecordState::Completed,
        _ => return Err(codec("record state")),
    };
    let namespace = std::str::from_utf8(&stored[HEADER..start])
        .map_err(|_| codec("namespace"))?
        .to_owned();
    let completed_at = match state {
        RecordState::InProgress => None,
        RecordState::Completed => Some(from_unix_millis(u64_at(&stored, 69))),
    };
    let mut record = Record {
        key: *key,
        namespace,
        fingerprint: Fingerprint(be(&stored, 1)),
        state,
        token: FencingToken(u64_at(&stored, 33)),
        attempts: u32::from_be_bytes(be(&stored, 41)),
        created_at: from_unix_millis(u64_at(&stored, 45)),
        updated_at: from_unix_millis(u64_at(&stored, 53)),
        completed_at,
        expires_at: from_unix_millis(u64_at(&stored, 61)),
        outcome: None,
    };
    if state == RecordState::Completed {
        record.outcome = Some(outcome(stored)?);
    }
    Ok(Some(record))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn packed(state: u8, namespace: &str, body: &[u8]) -> Vec<u8> {
        let mut record = vec![state];
        record.extend_from_slice(&[7; 32]);
        record.extend_from_slice(&42u64.to_be_bytes());
        record.extend_from_slice(&2u32.to_be_bytes());
        for millis in [1_000u64, 2_000, 3_000, 4_000] {
            record.extend_from_slice(&millis.to_be_bytes());
        }
        record.extend_from_slice(&201u16.to_be_bytes());
        record.extend_from_slice(&(namespace.len() as u16).to_be_bytes());
        record.extend_from_slice(namespace.as_bytes());
        record.extend_from_slice(body);
        record
    }

    #[test]
    fn decodes_claim_replies() {
        let acquired = Value::Array(vec![
            Value::Int(1),
            Value::Int(7),
            Value::Int(2),
            Value::Int(1),
        ]);
        assert_eq!(
            claim_reply(acquired).unwrap(),
            Claim::Acquired(Lease {
                token: FencingToken(7),
                attempt: 2,
                took_over: true
            })
        );
        let replay = Value::Array(vec![
            Value::Int(3),
            Value::BulkString(packed(b'c', "ns", &[0, 255])),
        ]);
        assert_eq!(
            claim_reply(replay).unwrap(),
            Claim::Completed(Outcome::new(201, vec![0u8, 255]))
        );
        assert_eq!(
            claim_reply(Value::Array(vec![Value::Int(4)])).unwrap(),
            Claim::Mismatch
        );
        assert!(matches!(
            claim_reply(Value::Array(vec![Value::Int(9)])),
            Err(StoreError::Codec(_))
        ));
    }

    #[test]
    fn decodes_records() {
        let key = StorageKey([1; 32]);
        assert_eq!(record(&key, None).unwrap(), None);
        let completed = record(&key, Some(packed(b'c', "orders", b"ok")))
            .unwrap()
            .unwrap();
        assert_eq!(completed.namespace, "orders");
        assert_eq!(completed.token, FencingToken(42));
        assert_eq!(completed.attempts, 2);
        assert_eq!(completed.fingerprint, Fingerprint([7; 32]));
        assert_eq!(completed.expires_at, from_unix_millis(3_000));
        assert_eq!(completed.completed_at, Some(from_unix_millis(4_000)));
        assert_eq!(completed.outcome, Some(Outcome::new(201, "ok")));
        let in_progress = record(&key, Some(packed(b'p', "orders", b"")))
            .unwrap()
            .unwrap();
        assert_eq!(in_progress.outcome, None);
        assert_eq!(in_progress.completed_at, None);
        assert!(matches!(
            record(&key, Some(packed(b'x', "", b""))),
            Err(StoreError::Codec(_))
        ));
        assert!(matches!(
            record(&key, Some(vec![b'c'; 10])),
            Err(StoreError::Codec(_))
        ));
    }
}
