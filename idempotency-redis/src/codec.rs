//! The packed record and the decoding of replies.
//!
//! A record is one string (offsets from 0; integers big-endian):
//!
//! | bytes | field |
//! |---|---|
//! | 0 | state: `p` in progress, `c` completed |
//! | 1..33 | fingerprint (raw BLAKE3 digest) |
//! | 33..41 | fencing token |
//! | 41..45 | attempts |
//! | 45..53 | created, Unix ms |
//! | 53..61 | updated, Unix ms |
//! | 61..69 | in progress: lease end; completed: expiry (Unix ms) |
//! | 69..77 | in progress: abandoned grace (ms); completed: completed at (Unix ms) |
//! | 77..79 | outcome status (0 while in progress) |
//! | 79..81 | namespace field's length `n`; its top bit set: a conflict mark follows the field |
//! | 81..81+n | namespace (UTF-8), then what wrote the record: a NUL, the mechanism's letter and the key derivation's digit (absent in records written before records said it) |
//! | 81+n..93+n | conflict mark, when flagged: conflicts (4 bytes), last one at (Unix ms) |
//! | 81+n(+12).. | outcome body, raw bytes (completed records only) |
//!
//! Records without a conflict mark are written as before it existed, so they decode alike;
//! the mark is added by the mark script ([`super::scripts::MARK_CONFLICT`]), kept by complete
//! and touch, and dropped by a claim that writes the record anew.
//!
//! What wrote the record is kept inside the namespace's length, so that the scripts, which
//! copy the namespace on every step, keep it, and a release that does not read it still finds
//! the body where it was.
//!
//! Times are written by the client that made the step (its clock), for reconciliation and as a
//! hint. Nothing is decided by them on the server: a completed record lives while its key
//! exists, and an in-progress record's lease ends `grace` before its key expires.

use std::time::Duration;

use ::redis::Value;
use bytes::Bytes;

use super::fencing;
use crate::time::from_unix_millis;
use idempotency_core::{
    Claim, ClaimRequest, FencingToken, Fingerprint, Lease, Mechanism, Outcome, Record, RecordState,
    StorageKey, StoreError,
};

/// The fixed part of every record, before its namespace.
pub(super) const HEADER: usize = 81;
/// Where the fields a step rewrites start: updated, lease end / expiry, grace / completed at.
const UPDATED: usize = 53;

fn codec(what: &str) -> StoreError {
    StoreError::Codec(format!("redis: unexpected {what}").into())
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

/// The flag of a conflict mark in the namespace length field.
pub(super) const MARKED: u16 = 0x8000;
/// The length of a conflict mark: conflicts (u32), last one at (Unix ms, u64).
const MARK_LEN: usize = 12;
/// The longest namespace a record holds (the length field's top bit is the mark's flag).
pub(super) const MAX_NAMESPACE: usize = (MARKED - 1) as usize;

/// The namespace's end and the body's start (after the conflict mark, if any), after checking
/// the record is long enough.
fn namespace_end(record: &[u8]) -> Result<(usize, usize), StoreError> {
    if record.len() < HEADER {
        return Err(codec("record length"));
    }
    let length = u16_at(record, 79);
    let end = HEADER + usize::from(length & !MARKED);
    let body = if length & MARKED == 0 {
        end
    } else {
        end + MARK_LEN
    };
    if record.len() < body {
        return Err(codec("record length"));
    }
    Ok((end, body))
}

/// The body's start, after checking the record is long enough.
fn body_start(record: &[u8]) -> Result<usize, StoreError> {
    namespace_end(record).map(|(_, body)| body)
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

/// Decodes the claim script's reply (see `scripts::CLAIM`); a token it chose (a takeover's
/// `max(old + 1, candidate)`) pushes this process's token clock past it.
pub(super) fn claim_reply(reply: Value) -> Result<Claim, StoreError> {
    let Value::Array(mut items) = reply else {
        return Err(codec("claim reply"));
    };
    let tag = items.first().map(int).transpose()?;
    match (tag, items.len()) {
        (Some(1), 4) => {
            let token = unsigned(&items[1])?;
            fencing::observe(token);
            Ok(Claim::Acquired(Lease {
                token: FencingToken::new(token),
                attempt: unsigned(&items[2])?,
                took_over: int(&items[3])? == 1,
            }))
        }
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

/// The namespace a claim writes, and what wrote the record.
#[derive(Clone, Copy, Debug)]
pub(super) struct Written<'a> {
    pub(super) namespace: &'a str,
    pub(super) mechanism: Option<Mechanism>,
    pub(super) key_derivation: Option<u8>,
}

impl<'a> Written<'a> {
    /// What `request` writes.
    pub(super) fn of(request: &ClaimRequest<'a>) -> Self {
        Self {
            namespace: request.namespace,
            mechanism: request.mechanism,
            key_derivation: request.key_derivation,
        }
    }

    /// The trailer saying what wrote the record, if anything is known of it.
    fn trailer(&self) -> Option<[u8; 3]> {
        if self.mechanism.is_none() && self.key_derivation.is_none() {
            return None;
        }
        let mechanism = self.mechanism.map_or(b'-', mechanism_byte);
        let derivation = match self.key_derivation {
            Some(version @ 0..=9) => b'0' + version,
            _ => b'-',
        };
        Some([0, mechanism, derivation])
    }

    /// The bytes of the namespace field (namespace and trailer).
    pub(super) fn len(&self) -> usize {
        self.namespace.len() + self.trailer().map_or(0, |trailer| trailer.len())
    }

    fn append(&self, record: &mut Vec<u8>) {
        // The store refuses longer namespaces before encoding.
        let length = u16::try_from(self.len()).unwrap_or(u16::MAX);
        record.extend_from_slice(&length.to_be_bytes());
        record.extend_from_slice(self.namespace.as_bytes());
        if let Some(trailer) = self.trailer() {
            record.extend_from_slice(&trailer);
        }
    }
}

/// A mechanism's byte in the record: the first letter of its name (`r`, `f`, `t`, `m`), which
/// tells every mechanism apart.
fn mechanism_byte(mechanism: Mechanism) -> u8 {
    mechanism.as_str().as_bytes()[0]
}

/// The namespace field read back: the namespace, the mechanism and the key derivation.
fn read_written(field: &[u8]) -> Result<(String, Option<Mechanism>, Option<u8>), StoreError> {
    let text = |bytes: &[u8]| {
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| codec("namespace"))
    };
    let [.., 0, mechanism, derivation] = field else {
        return Ok((text(field)?, None, None));
    };
    let mechanism = match *mechanism {
        b'-' => None,
        byte => match Mechanism::ALL
            .into_iter()
            .find(|known| mechanism_byte(*known) == byte)
        {
            Some(known) => Some(known),
            None => return Ok((text(field)?, None, None)),
        },
    };
    let derivation = match *derivation {
        b'-' => None,
        digit @ b'0'..=b'9' => Some(digit - b'0'),
        _ => return Ok((text(field)?, None, None)),
    };
    Ok((text(&field[..field.len() - 3])?, mechanism, derivation))
}

/// A new in-progress record, first attempt, as the native claim writes it.
pub(super) fn in_progress(
    fingerprint: &Fingerprint,
    token: u64,
    now_ms: u64,
    lease_ms: u64,
    grace_ms: u64,
    namespace: Written<'_>,
) -> Vec<u8> {
    let mut record = Vec::with_capacity(HEADER + namespace.len());
    record.push(b'p');
    record.extend_from_slice(&fingerprint.0);
    record.extend_from_slice(&token.to_be_bytes());
    record.extend_from_slice(&1u32.to_be_bytes());
    record.extend_from_slice(&now_ms.to_be_bytes());
    append_tail(&mut record, now_ms, lease_ms, grace_ms, namespace);
    record
}

/// The bytes of a new in-progress record from offset 53 on (the claim script adds the state,
/// fingerprint, token, attempts and created time).
pub(super) fn in_progress_tail(
    now_ms: u64,
    lease_ms: u64,
    grace_ms: u64,
    namespace: Written<'_>,
) -> Vec<u8> {
    let mut tail = Vec::with_capacity(HEADER - UPDATED + namespace.len());
    append_tail(&mut tail, now_ms, lease_ms, grace_ms, namespace);
    tail
}

fn append_tail(
    record: &mut Vec<u8>,
    now_ms: u64,
    lease_ms: u64,
    grace_ms: u64,
    namespace: Written<'_>,
) {
    record.extend_from_slice(&lease_fields(now_ms, lease_ms, grace_ms));
    record.extend_from_slice(&0u16.to_be_bytes());
    namespace.append(record);
}

/// Bytes 53..77 of an in-progress record: updated, lease end, grace (the touch script writes
/// them as they are).
pub(super) fn lease_fields(now_ms: u64, lease_ms: u64, grace_ms: u64) -> [u8; 24] {
    let mut fields = [0u8; 24];
    fields[..8].copy_from_slice(&now_ms.to_be_bytes());
    fields[8..16].copy_from_slice(&now_ms.saturating_add(lease_ms).to_be_bytes());
    fields[16..].copy_from_slice(&grace_ms.to_be_bytes());
    fields
}

/// Bytes 53..79 of a completed record: updated, expiry, completed at, status.
pub(super) fn completed_fields(now_ms: u64, ttl_ms: u64, status: u16) -> [u8; 26] {
    let mut fields = [0u8; 26];
    fields[..8].copy_from_slice(&now_ms.to_be_bytes());
    fields[8..16].copy_from_slice(&now_ms.saturating_add(ttl_ms).to_be_bytes());
    fields[16..24].copy_from_slice(&now_ms.to_be_bytes());
    fields[24..].copy_from_slice(&status.to_be_bytes());
    fields
}

/// What the native claim found in an existing record.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Existing {
    /// The answer, from the record alone.
    Decided(Claim),
    /// An in-progress record whose lease is at or near its end by the client's clock: the
    /// claim script, which goes by the server's TTL, decides.
    LeaseEnding,
}

/// Decides a claim from the record the native `SET ... NX GET` (or a `GET`) returned, without
/// a clock for a completed record (it lives while its key exists) and with the client's clock,
/// `margin` on the safe side, for an in-progress one. Pushes this process's token clock past the record's
/// token.
pub(super) fn existing(
    stored: Vec<u8>,
    fingerprint: &Fingerprint,
    now_ms: u64,
    margin_ms: u64,
) -> Result<Existing, StoreError> {
    body_start(&stored)?;
    fencing::observe(u64_at(&stored, 33));
    let same = stored[1..33] == fingerprint.0;
    match stored[0] {
        b'c' if same => Ok(Existing::Decided(Claim::Completed(outcome(stored)?))),
        b'c' => Ok(Existing::Decided(Claim::Mismatch)),
        b'p' => {
            let lease_end = u64_at(&stored, 61);
            if lease_end > now_ms.saturating_add(margin_ms) {
                Ok(Existing::Decided(if same {
                    Claim::InProgress {
                        lease_remaining: Duration::from_millis(lease_end - now_ms),
                    }
                } else {
                    Claim::Mismatch
                }))
            } else {
                Ok(Existing::LeaseEnding)
            }
        }
        _ => Err(codec("record state")),
    }
}

/// Encodes a fencing token as the script compares it (8 bytes, big-endian).
pub(super) fn token_bytes(token: FencingToken) -> [u8; 8] {
    token.get().to_be_bytes()
}

/// The in-progress record the touch script would write over `in_progress`: its lease fields
/// (updated, lease end, grace) replaced by `fields`. `in_progress` has its whole header.
pub(super) fn renewed(in_progress: &[u8], fields: &[u8; 24]) -> Vec<u8> {
    let mut record = in_progress.to_vec();
    record[UPDATED..UPDATED + fields.len()].copy_from_slice(fields);
    record
}

/// The completed record the complete script would write over `in_progress`: its state, then
/// its fingerprint, token, attempts and created time, the completed fields, its namespace
/// (length and bytes) and the outcome body. `in_progress` has its whole header.
pub(super) fn completed_from(in_progress: &[u8], fields: &[u8; 26], body: &[u8]) -> Vec<u8> {
    let mut record = Vec::with_capacity(in_progress.len() + body.len());
    record.push(b'c');
    record.extend_from_slice(&in_progress[1..UPDATED]);
    record.extend_from_slice(fields);
    record.extend_from_slice(&in_progress[UPDATED + fields.len()..]);
    record.extend_from_slice(body);
    record
}

/// The key of a record's checkpoints (a run with steps, [`super::scripts::CHECKPOINT`]):
/// `<record key>:p`, in the record's slot (its hash tag).
pub(crate) fn progress_key(record_key: &str) -> String {
    format!("{record_key}:p")
}

/// The record `stored` with the run's checkpoints `progress` (`<record key>:p`), which count
/// only for a record in progress with the created time they start with (a takeover keeps it; a
/// new record of the key has another).
pub(super) fn record_with_progress(
    key: &StorageKey,
    stored: Option<Vec<u8>>,
    progress: Option<Vec<u8>>,
) -> Result<Option<Record>, StoreError> {
    let created = stored
        .as_ref()
        .filter(|stored| stored.first() == Some(&b'p'))
        .and_then(|stored| stored.get(45..53).map(<[u8]>::to_vec));
    let mut record = record(key, stored)?;
    if let (Some(record), Some(created), Some(progress)) = (&mut record, created, progress)
        && progress.get(..8) == Some(&created[..])
    {
        record.progress = Some(idempotency_core::Progress::decode(&progress[8..])?);
    }
    Ok(record)
}

/// Decodes a stored record (`GET`); `None` is an absent key.
pub(super) fn record(
    key: &StorageKey,
    stored: Option<Vec<u8>>,
) -> Result<Option<Record>, StoreError> {
    let Some(stored) = stored else {
        return Ok(None);
    };
    let (end, start) = namespace_end(&stored)?;
    let state = match stored[0] {
        b'p' => RecordState::InProgress,
        b'c' => RecordState::Completed,
        _ => return Err(codec("record state")),
    };
    let (namespace, mechanism, key_derivation) = read_written(&stored[HEADER..end])?;
    let completed_at = match state {
        RecordState::InProgress => None,
        RecordState::Completed => Some(from_unix_millis(u64_at(&stored, 69))),
    };
    let mut record = Record {
        key: *key,
        namespace,
        fingerprint: Fingerprint(be(&stored, 1)),
        state,
        token: FencingToken::new(u64_at(&stored, 33)),
        attempts: u32::from_be_bytes(be(&stored, 41)),
        created_at: from_unix_millis(u64_at(&stored, 45)),
        updated_at: from_unix_millis(u64_at(&stored, 53)),
        completed_at,
        expires_at: from_unix_millis(u64_at(&stored, 61)),
        outcome: None,
        conflicts: 0,
        last_conflict_at: None,
        mechanism,
        key_derivation,
        progress: None,
    };
    if start > end {
        record.conflicts = u32::from_be_bytes(be(&stored, end));
        record.last_conflict_at = Some(from_unix_millis(u64_at(&stored, end + 4)));
    }
    if state == RecordState::Completed {
        record.outcome = Some(outcome(stored)?);
    }
    Ok(Some(record))
}

#[cfg(test)]
mod tests;
