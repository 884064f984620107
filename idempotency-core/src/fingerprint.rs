//! Fingerprints: what a key was first used with.

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::fmt;

/// A SHA-256 digest of the parts of a request that must not change between retries.
///
/// The same key sent with another fingerprint is a client bug (or an attack) and is refused
/// (HTTP 422) without running the handler.
///
/// ```
/// use idempotency_core::Fingerprint;
/// use serde_json::json;
///
/// let a = Fingerprint::of_request("POST", "/orders?x=1", br#"{"amount":1}"#);
/// let b = Fingerprint::of_request("POST", "/orders?x=1", br#"{"amount":2}"#);
/// assert_ne!(a, b);
///
/// // Selected JSON fields, independent of field order and of other fields.
/// let x = Fingerprint::of_json_fields(&json!({"a": 1, "b": {"c": 2, "d": 3}, "t": 9}), &["/a", "/b"]);
/// let y = Fingerprint::of_json_fields(&json!({"t": 0, "b": {"d": 3, "c": 2}, "a": 1}), &["/a", "/b"]);
/// assert_eq!(x, y);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    /// The default HTTP fingerprint: method, path and query, and the body bytes.
    pub fn of_request(method: &str, path_and_query: &str, body: &[u8]) -> Self {
        Self::builder()
            .field(b"method", method.as_bytes())
            .field(b"target", path_and_query.as_bytes())
            .field(b"body", body)
            .finish()
    }

    /// A fingerprint of arbitrary bytes.
    pub fn of_bytes(bytes: &[u8]) -> Self {
        Self::builder().field(b"bytes", bytes).finish()
    }

    /// A fingerprint of selected JSON fields (JSON Pointers), canonicalised so that field order
    /// and whitespace do not matter. A missing field hashes differently from `null`.
    pub fn of_json_fields(value: &Value, pointers: &[&str]) -> Self {
        Self::builder().json_fields(value, pointers).finish()
    }

    /// Starts a fingerprint of named fields.
    pub fn builder() -> FingerprintBuilder {
        FingerprintBuilder(Sha256::new())
    }

    /// Lower-case hex, 64 characters.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({})", &self.to_hex()[..16])
    }
}

/// Builds a [`Fingerprint`] from named, length-prefixed fields (no two field lists collide by
/// concatenation).
#[derive(Clone)]
pub struct FingerprintBuilder(Sha256);

impl FingerprintBuilder {
    /// Adds a named field.
    pub fn field(mut self, name: &[u8], value: &[u8]) -> Self {
        update_framed(&mut self.0, name);
        update_framed(&mut self.0, value);
        self
    }

    /// Adds the selected fields of a JSON document (JSON Pointers), each named by its pointer
    /// and written in its [`canonical_json`] form; a missing field differs from `null`.
    pub fn json_fields(self, value: &Value, pointers: &[&str]) -> Self {
        pointers.iter().fold(self, |builder, pointer| {
            let canonical = value.pointer(pointer).map(canonical_json);
            builder.json_field(pointer, canonical.as_ref().map(String::as_bytes))
        })
    }

    /// Adds one selected JSON field: its pointer and its [`canonical_json`] text, or `None`
    /// where the document does not have it (which differs from `null`).
    pub fn json_field(self, pointer: &str, canonical: Option<&[u8]>) -> Self {
        self.field(pointer.as_bytes(), canonical.unwrap_or(b"\0absent"))
    }

    /// The finished fingerprint.
    pub fn finish(self) -> Fingerprint {
        Fingerprint(self.0.finalize().into())
    }
}

/// Feeds `part` to `hasher` after its length (an unsigned LEB128 varint: one byte below 128),
/// so that no two lists of parts hash the same bytes. Short framing keeps a typical key or
/// fingerprint within one or two SHA-256 blocks.
pub(crate) fn update_framed(hasher: &mut Sha256, part: &[u8]) {
    let mut short = [0u8; 64];
    if part.len() < short.len() {
        // One length byte and the part, in one update (each update has a fixed cost).
        short[0] = part.len() as u8;
        short[1..=part.len()].copy_from_slice(part);
        hasher.update(&short[..=part.len()]);
        return;
    }
    let (mut length, mut buffer, mut at) = (part.len() as u64, [0u8; 10], 0);
    while length >= 0x80 {
        buffer[at] = (length as u8 & 0x7f) | 0x80;
        length >>= 7;
        at += 1;
    }
    buffer[at] = length as u8;
    hasher.update(&buffer[..=at]);
    hasher.update(part);
}

/// Canonical JSON text: object keys sorted, no insignificant whitespace.
///
/// ```
/// use idempotency_core::canonical_json;
/// use serde_json::json;
/// assert_eq!(canonical_json(&json!({"b": [1, {"d": 1, "c": 2}], "a": null})), r#"{"a":null,"b":[1,{"c":2,"d":1}]}"#);
/// ```
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (index, (key, field)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(field, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_do_not_collide_by_concatenation() {
        assert_ne!(
            Fingerprint::of_request("POST", "/ab", b"c"),
            Fingerprint::of_request("POST", "/a", b"bc")
        );
    }

    #[test]
    fn framing_is_leb128() {
        let framed = |part: &[u8]| {
            let mut hasher = Sha256::new();
            update_framed(&mut hasher, part);
            hasher.finalize()
        };
        let raw = |bytes: &[u8]| Sha256::digest(bytes);
        assert_eq!(framed(b"ab"), raw(b"\x02ab"));
        let edge = [9u8; 64];
        assert_eq!(
            framed(&edge[..63]),
            raw(&[&[63u8][..], &edge[..63]].concat())
        );
        assert_eq!(framed(&edge), raw(&[&[64u8][..], &edge[..]].concat()));
        let long = [7u8; 300];
        let mut expected = vec![0xac, 0x02];
        expected.extend_from_slice(&long);
        assert_eq!(framed(&long), raw(&expected));
    }

    #[test]
    fn absent_differs_from_null() {
        assert_ne!(
            Fingerprint::of_json_fields(&json!({}), &["/a"]),
            Fingerprint::of_json_fields(&json!({"a": null}), &["/a"])
        );
    }
}
