//! Decoding script replies and stored hashes.

use std::collections::HashMap;
use std::time::Duration;

use ::redis::Value;
use bytes::Bytes;

use crate::time::from_unix_millis;
use crate::{
    Claim, FencingToken, Fingerprint, Lease, Outcome, Record, RecordState, StorageKey, StoreError,
};

fn codec(what: &str) -> StoreError {
    StoreError::Codec(format!("redis: unexpected {what}"))
}

fn int(value: &Value) -> Result<i64, StoreError> {
    match value {
        Value::Int(number) => Ok(*number),
        Value::BulkString(text) => std::str::from_utf8(text)
            .ok()
            .and_then(|text| text.parse().ok())
            .ok_or_else(|| codec("number")),
        _ => Err(codec("reply type, expected a number")),
    }
}

fn unsigned<T: TryFrom<i64>>(value: &Value) -> Result<T, StoreError> {
    T::try_from(int(value)?).map_err(|_| codec("number out of range"))
}

/// Decodes the claim script's reply (see `scripts::CLAIM`).
pub(super) fn claim_reply(reply: Value) -> Result<Claim, StoreError> {
    let Value::Array(items) = reply else {
        return Err(codec("claim reply"));
    };
    match items.as_slice() {
        [tag, token, attempt, took_over] if int(tag)? == 1 => Ok(Claim::Acquired(Lease {
            token: FencingToken(unsigned(token)?),
            attempt: unsigned(attempt)?,
            took_over: int(took_over)? == 1,
        })),
        [tag, remaining] if int(tag)? == 2 => Ok(Claim::InProgress {
            lease_remaining: Duration::from_millis(unsigned(remaining)?),
        }),
        [tag, status, body] if int(tag)? == 3 => Ok(Claim::Completed(Outcome {
            status: unsigned(status)?,
            body: match body {
                Value::BulkString(bytes) => Bytes::from(bytes.clone()),
                _ => return Err(codec("stored body")),
            },
        })),
        [tag] if int(tag)? == 4 => Ok(Claim::Mismatch),
        _ => Err(codec("claim reply")),
    }
}

/// Decodes a stored hash (`HGETALL`); an empty hash is an absent key.
pub(super) fn record(
    key: &StorageKey,
    mut fields: HashMap<String, Vec<u8>>,
) -> Result<Option<Record>, StoreError> {
    if fields.is_empty() {
        return Ok(None);
    }
    let mut take = |name: &str| fields.remove(name).ok_or_else(|| codec("record field"));
    let number =
        |bytes: Vec<u8>| -> Result<u64, StoreError> { unsigned(&Value::BulkString(bytes)) };
    let state = match take("s")?.as_slice() {
        b"p" => RecordState::InProgress,
        b"c" => RecordState::Completed,
        _ => return Err(codec("record state")),
    };
    let fingerprint = Fingerprint(
        take("f")?
            .try_into()
            .map_err(|_| codec("fingerprint length"))?,
    );
    let namespace = String::from_utf8(take("n")?).map_err(|_| codec("namespace"))?;
    let token = FencingToken(number(take("t")?)?);
    let attempts = u32::try_from(number(take("a")?)?).map_err(|_| codec("attempts"))?;
    let created_at = from_unix_millis(number(take("c")?)?);
    let updated_at = from_unix_millis(number(take("u")?)?);
    let expires_at = from_unix_millis(number(take("e")?)?);
    let (completed_at, outcome) = match state {
        RecordState::InProgress => (None, None),
        RecordState::Completed => {
            let completed_at = from_unix_millis(number(take("d")?)?);
            let status = u16::try_from(number(take("o")?)?).map_err(|_| codec("status"))?;
            let body = Bytes::from(take("b")?);
            (Some(completed_at), Some(Outcome { status, body }))
        }
    };
    Ok(Some(Record {
        key: *key,
        namespace,
        fingerprint,
        state,
        token,
        attempts,
        created_at,
        updated_at,
        completed_at,
        expires_at,
        outcome,
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

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
            Value::Int(201),
            Value::BulkString(vec![0, 255]),
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
    fn empty_hash_is_absent_and_bad_state_is_an_error() {
        let key = StorageKey([1; 32]);
        assert_eq!(record(&key, HashMap::new()).unwrap(), None);
        let fields = HashMap::from([("s".to_owned(), b"x".to_vec())]);
        assert!(matches!(record(&key, fields), Err(StoreError::Codec(_))));
    }
}
