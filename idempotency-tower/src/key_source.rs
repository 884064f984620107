//! Where the idempotency key comes from.

use std::sync::Arc;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue};
use idempotency_core::{IdempotencyKey, KeyError};
use serde_json::Value;

use crate::json::LazyJson;

/// A user function that reads the key from the request head and the collected body.
/// `Ok(None)` means "no key" (refused with 400 where the key is required, passed through where
/// it is optional).
pub type KeyFn =
    dyn Fn(&Parts, &Bytes) -> Result<Option<IdempotencyKey>, KeyError> + Send + Sync + 'static;

/// Where the idempotency key is read from.
#[derive(Clone)]
#[non_exhaustive]
pub enum KeySource {
    /// A header, `Idempotency-Key` by default (also gRPC metadata `idempotency-key`). Accepts an
    /// RFC 8941 sf-string (`"…"`) or a bare token; two values are refused. The body is not read
    /// to find the key.
    Header(HeaderName),
    /// A field of a JSON body, named by a JSON Pointer such as `/trade_no`. A string is the key;
    /// an integer within 64 bits (`i64` or `u64`) is the key in decimal, exactly as written
    /// without a sign for positives (`{"trade_no": 42}` has the key `42`); `null` or an absent
    /// field means no key. Any other number (a fraction, an exponent, an integer beyond 64
    /// bits: exact digits cannot be kept for them), any other type, or a body that is not JSON
    /// is refused (400).
    JsonPointer(String),
    /// A user function over the request head and the collected body.
    Custom(Arc<KeyFn>),
}

impl std::fmt::Debug for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Header(name) => f.debug_tuple("Header").field(name).finish(),
            Self::JsonPointer(pointer) => f.debug_tuple("JsonPointer").field(pointer).finish(),
            Self::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

impl KeySource {
    /// The JSON Pointer this key is read from, if any.
    pub(crate) fn json_pointer(&self) -> Option<&str> {
        match self {
            Self::JsonPointer(pointer) => Some(pointer),
            _ => None,
        }
    }

    /// Whether the body must be collected to find the key.
    pub(crate) fn needs_body(&self) -> bool {
        !matches!(self, Self::Header(_))
    }

    /// The key from the body (for [`KeySource::JsonPointer`] and [`KeySource::Custom`]).
    pub(crate) fn read(
        &self,
        parts: &Parts,
        body: &Bytes,
        json: &mut LazyJson<'_>,
    ) -> Result<Option<IdempotencyKey>, KeyError> {
        match self {
            Self::Header(name) => key_from_headers(&parts.headers, name),
            Self::JsonPointer(pointer) => match json.field(pointer).map_err(KeyError::Body)? {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(text)) => IdempotencyKey::parse(text).map(Some),
                // Only integers that are exact in 64 bits: a larger or fractional number is
                // read as a float, whose text would merge distinct keys.
                Some(Value::Number(number)) if number.is_i64() || number.is_u64() => {
                    IdempotencyKey::parse(&number.to_string()).map(Some)
                }
                Some(Value::Number(_)) => Err(KeyError::Body(format!(
                    "the field {pointer} is not an integer within 64 bits; send it as a string"
                ))),
                Some(_) => Err(KeyError::Body(format!(
                    "the field {pointer} must be a string or an integer"
                ))),
            },
            Self::Custom(read) => read(parts, body),
        }
    }
}

/// Reads and validates a key header: absent → `Ok(None)`, two values → [`KeyError::Multiple`].
pub fn key_from_headers(
    headers: &HeaderMap,
    name: &HeaderName,
) -> Result<Option<IdempotencyKey>, KeyError> {
    key_header(headers, name)?
        .map(|value| IdempotencyKey::from_header(value.as_bytes()))
        .transpose()
}

/// The key header's one value: absent → `Ok(None)`, two values → [`KeyError::Multiple`].
pub(crate) fn key_header<'a>(
    headers: &'a HeaderMap,
    name: &HeaderName,
) -> Result<Option<&'a HeaderValue>, KeyError> {
    let mut values = headers.get_all(name).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(KeyError::Multiple);
    }
    Ok(Some(first))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use http::{HeaderValue, Request};

    fn parts() -> Parts {
        Request::new(()).into_parts().0
    }

    #[test]
    fn header_rules() {
        let name = HeaderName::from_static("idempotency-key");
        let mut headers = HeaderMap::new();
        assert_eq!(key_from_headers(&headers, &name), Ok(None));
        headers.insert(&name, HeaderValue::from_static("\"k-1\""));
        assert_eq!(
            key_from_headers(&headers, &name).unwrap().unwrap().as_str(),
            "k-1"
        );
        headers.append(&name, HeaderValue::from_static("k-2"));
        assert_eq!(key_from_headers(&headers, &name), Err(KeyError::Multiple));
        headers.insert(&name, HeaderValue::from_static(""));
        assert_eq!(key_from_headers(&headers, &name), Err(KeyError::Empty));
    }

    fn from_json(pointer: &str, body: &'static str) -> Result<Option<IdempotencyKey>, KeyError> {
        let body = Bytes::from_static(body.as_bytes());
        let plan = crate::json::JsonPlan::new([pointer]);
        let mut json = LazyJson::new(&plan, &body);
        KeySource::JsonPointer(pointer.to_owned()).read(&parts(), &body, &mut json)
    }

    #[test]
    fn json_rules() {
        let key = |k: Result<Option<IdempotencyKey>, KeyError>| k.unwrap().unwrap().to_string();
        assert_eq!(key(from_json("/trade_no", r#"{"trade_no":"T1"}"#)), "T1");
        assert_eq!(key(from_json("/a/b", r#"{"a":{"b":12345}}"#)), "12345");
        assert_eq!(from_json("/trade_no", r#"{"x":1}"#), Ok(None));
        assert_eq!(from_json("/trade_no", r#"{"trade_no":null}"#), Ok(None));
        assert!(matches!(
            from_json("/trade_no", r#"{"trade_no":true}"#),
            Err(KeyError::Body(_))
        ));
        assert!(matches!(
            from_json("/trade_no", r#"{"trade_no":"#),
            Err(KeyError::Body(_))
        ));
        assert_eq!(from_json("/t", r#"{"t":""}"#), Err(KeyError::Empty));
    }

    #[test]
    fn json_numbers_are_keys_only_when_exact() {
        let key = |k: Result<Option<IdempotencyKey>, KeyError>| k.unwrap().unwrap().to_string();
        assert_eq!(
            key(from_json("/t", r#"{"t":18446744073709551615}"#)),
            "18446744073709551615"
        );
        assert_eq!(
            key(from_json("/t", r#"{"t":-9223372036854775808}"#)),
            "-9223372036854775808"
        );
        // Beyond 64 bits, a float would make these two one key: both refused.
        for body in [
            r#"{"t":1234567890123456789012345678901234567890}"#,
            r#"{"t":1234567890123456789012345678901234567891}"#,
            r#"{"t":18446744073709551616}"#,
            r#"{"t":4.2}"#,
            r#"{"t":1e3}"#,
        ] {
            assert!(
                matches!(from_json("/t", body), Err(KeyError::Body(_))),
                "{body}"
            );
        }
    }
}
