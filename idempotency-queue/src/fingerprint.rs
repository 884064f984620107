//! What a consumer fingerprints a message by, and what a conflicting copy gets.

use std::sync::Arc;

use idempotency_core::Fingerprint;
use serde_json::Value;

use crate::Message;

/// Counter of conflicting copies acked as duplicates ([`OnConflict::Ack`]): the same business
/// key with other fingerprinted content. Labelled `namespace`.
pub const CONFLICTS: &str = "idempotency_queue_conflicts_total";

/// What a delivery whose key was first used with another fingerprint gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnConflict {
    /// Acked as the duplicate it is ([`Verdict::Conflict`](crate::Verdict::Conflict)), never
    /// run, logged at WARN and counted ([`CONFLICTS`]): a sender that re-sends an event with
    /// another field (a new timestamp outside the fingerprint, or a corrected amount) must not
    /// retry it for a day. The default with [`fingerprint_json_fields`](crate::IdempotentConsumer::fingerprint_json_fields).
    Ack,
    /// Dead-lettered ([`RejectReason::Mismatch`](crate::RejectReason::Mismatch)), never run. The
    /// default with a fingerprint of the payload bytes or a function of yours.
    DeadLetter,
}

/// How a consumer fingerprints messages.
pub(crate) enum MessageFingerprint {
    /// The payload bytes.
    Payload,
    /// The selected fields of a JSON payload, canonical.
    JsonFields(Arc<[String]>),
    /// A user function.
    Custom(Box<dyn Fn(&Message) -> Fingerprint + Send + Sync>),
}

impl MessageFingerprint {
    /// The fingerprint of `message`, or why its payload cannot have one (it is rejected).
    pub(crate) fn compute(&self, message: &Message) -> Result<Fingerprint, String> {
        match self {
            Self::Payload => Ok(Fingerprint::of_bytes(message.payload())),
            Self::Custom(compute) => Ok(compute(message)),
            Self::JsonFields(pointers) => {
                let body: Value = serde_json::from_slice(message.payload())
                    .map_err(|error| format!("the payload is not JSON: {error}"))?;
                let mut builder = Fingerprint::builder();
                for pointer in pointers.iter() {
                    let field = body.pointer(pointer);
                    if let Some(field) = field {
                        exact(pointer, field)?;
                    }
                    let canonical = field.map(idempotency_core::canonical_json);
                    builder.json_field(pointer, canonical.as_ref().map(String::as_bytes));
                }
                Ok(builder.finish())
            }
        }
    }

    /// What a conflicting copy gets unless configured.
    pub(crate) fn default_on_conflict(&self) -> OnConflict {
        match self {
            Self::JsonFields(_) => OnConflict::Ack,
            Self::Payload | Self::Custom(_) => OnConflict::DeadLetter,
        }
    }
}

/// The largest magnitude up to which every integer is an exact `f64`.
const EXACT_F64: f64 = 9_007_199_254_740_992.0;

/// Refuses a number whose text `serde_json` could not keep exactly: an integer beyond 64 bits
/// is read as a float, and two distinct ones would fingerprint alike.
fn exact(pointer: &str, value: &Value) -> Result<(), String> {
    match value {
        Value::Number(number) if number.as_f64().is_some_and(|f| f.abs() >= EXACT_F64) => {
            if number.is_i64() || number.is_u64() {
                Ok(())
            } else {
                Err(format!(
                    "{pointer} holds a number too large to fingerprint exactly (send it as a string)"
                ))
            }
        }
        Value::Array(items) => items.iter().try_for_each(|item| exact(pointer, item)),
        Value::Object(fields) => fields.values().try_for_each(|field| exact(pointer, field)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pointers: &[&str]) -> MessageFingerprint {
        MessageFingerprint::JsonFields(pointers.iter().map(|p| (*p).to_owned()).collect())
    }

    #[test]
    fn json_fields_ignore_order_spacing_and_other_fields() {
        let by = fields(&["/trade_no", "/status", "/amount"]);
        let first = Message::new(
            r#"{"trade_no":"T1","status":"PAID","amount":"8.80","notify_time":"10:00","sign":"a"}"#,
        );
        let retry = Message::new(
            r#"{ "sign":"b", "amount":"8.80", "notify_time":"10:05",
                 "status":"PAID", "trade_no":"T1" }"#,
        );
        let refund = Message::new(r#"{"trade_no":"T1","status":"REFUNDED","amount":"8.80"}"#);
        assert_eq!(by.compute(&first), by.compute(&retry));
        assert_ne!(by.compute(&first), by.compute(&refund));
    }

    #[test]
    fn numbers_are_fingerprinted_exactly_or_refused() {
        let by = fields(&["/trade_no"]);
        let a = by.compute(&Message::new(r#"{"trade_no":18446744073709551615}"#));
        let b = by.compute(&Message::new(r#"{"trade_no":18446744073709551614}"#));
        assert_ne!(a.unwrap(), b.unwrap());
        for beyond in [
            r#"{"trade_no":123456789012345678901234567890}"#,
            r#"{"trade_no":{"id":[123456789012345678901234567891]}}"#,
        ] {
            let refused = by.compute(&Message::new(beyond)).unwrap_err();
            assert!(refused.contains("too large"), "{refused}");
        }
        assert!(by.compute(&Message::new(r#"{"trade_no":12.5}"#)).is_ok());
        assert!(by.compute(&Message::new("not json")).is_err());
    }
}
