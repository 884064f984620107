//! Fingerprints: what a key was first used with.

use serde_json::Value;
use std::fmt;

use crate::framing::FramedHasher;

/// A BLAKE3 digest of the parts of a request that must not change between retries.
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
        FingerprintBuilder(FramedHasher::new())
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
/// concatenation). Fields are added in place (the builder gathers small input in a buffer of its
/// own, which passing it by value would copy at every field).
///
/// ```
/// use idempotency_core::Fingerprint;
///
/// let order = Fingerprint::builder()
///     .field(b"sku", b"A-1")
///     .field(b"quantity", b"2")
///     .finish();
/// assert_ne!(order, Fingerprint::of_bytes(b"A-1"));
///
/// // Fields added in a loop, to a builder kept in a variable:
/// let mut builder = Fingerprint::builder();
/// for (name, value) in [(&b"sku"[..], &b"A-1"[..]), (b"quantity", b"2")] {
///     builder.field(name, value);
/// }
/// assert_eq!(builder.finish(), order);
/// ```
#[derive(Clone)]
pub struct FingerprintBuilder(FramedHasher);

impl FingerprintBuilder {
    /// Adds a named field.
    #[inline]
    pub fn field(&mut self, name: &[u8], value: &[u8]) -> &mut Self {
        self.0.part(name);
        self.0.part(value);
        self
    }

    /// Adds the selected fields of a JSON document (JSON Pointers), each named by its pointer
    /// and written in its [`canonical_json`] form; a missing field differs from `null`.
    pub fn json_fields(&mut self, value: &Value, pointers: &[&str]) -> &mut Self {
        for pointer in pointers {
            let canonical = value.pointer(pointer).map(canonical_json);
            self.json_field(pointer, canonical.as_ref().map(String::as_bytes));
        }
        self
    }

    /// Adds one selected JSON field: its pointer and its [`canonical_json`] text, or `None`
    /// where the document does not have it (which differs from `null`).
    #[inline]
    pub fn json_field(&mut self, pointer: &str, canonical: Option<&[u8]>) -> &mut Self {
        self.field(pointer.as_bytes(), canonical.unwrap_or(b"\0absent"))
    }

    /// The fingerprint of the fields added so far (fields added after it go on from there).
    pub fn finish(&mut self) -> Fingerprint {
        Fingerprint(self.0.finish())
    }
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
