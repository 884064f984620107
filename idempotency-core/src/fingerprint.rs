//! Fingerprints: what a key was first used with.

use serde_json::Value;
use std::fmt;

use crate::framing::FramedHasher;

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
/// concatenation).
#[derive(Clone)]
pub struct FingerprintBuilder(FramedHasher);

impl FingerprintBuilder {
    /// Adds a named field.
    #[inline]
    pub fn field(mut self, name: &[u8], value: &[u8]) -> Self {
        self.0.part(name);
        self.0.part(value);
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
    #[inline]
    pub fn json_field(self, pointer: &str, canonical: Option<&[u8]>) -> Self {
        self.field(pointer.as_bytes(), canonical.unwrap_or(b"\0absent"))
    }

    /// The finished fingerprint.
    pub fn finish(self) -> Fingerprint {
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

    /// Stored records keep these digests: a change here makes every record written before it
    /// a mismatch. Values from the framing as first released (one `update` per part).
    #[test]
    fn digests_are_stable() {
        let hex = |f: Fingerprint| f.to_hex();
        assert_eq!(
            hex(Fingerprint::of_request(
                "POST",
                "/orders?x=1",
                br#"{"amount":1}"#
            )),
            "2291b03b2c9aa71f5db35414030a6be05f4552efa81b24a0bf173c7cbd92352e"
        );
        assert_eq!(
            hex(Fingerprint::of_request("PUT", "/p", &[5u8; 300])),
            "b68caa80c7b30bd6317482af302a5d17ffe2fac5d2ff607e2d36b5e3457faa45"
        );
        let body = json!({"trade_no": "T-1", "order_id": 1, "t": 9});
        assert_eq!(
            hex(Fingerprint::of_json_fields(
                &body,
                &["/trade_no", "/order_id", "/none"]
            )),
            "20a436e66d7f17fb82ba4576745a58116897c6e26cefa6d85970ad706a16e796"
        );
        for (len, pin) in [
            (
                127,
                "3c71a866987d8cb6bf36de36365660132542f15873ab31eb27de051f61ea7860",
            ),
            (
                128,
                "c78d48f20751c3f9c573651b6f358c446cb984137c4e986b618e72d22dbd995d",
            ),
            (
                200,
                "02c685cf3e21ccafc53c853976055307807d266e4ffeda7d15141944e50e78fa",
            ),
            (
                16_500,
                "cd2a0b93472720b634a6226aab47bbcc2c0e11f45ded827c61515714dc2191da",
            ),
        ] {
            assert_eq!(
                hex(Fingerprint::of_bytes(&vec![1u8; len])),
                pin,
                "{len} bytes"
            );
        }
        let many = (0..40).fold(Fingerprint::builder(), |builder, at| {
            builder.field(b"field", &vec![at; usize::from(at) * 3])
        });
        assert_eq!(
            hex(many.finish()),
            "433906a23d952519ddd11909578e03c087a3b22f42838880358d62a84520497c"
        );
    }

    #[test]
    fn absent_differs_from_null() {
        assert_ne!(
            Fingerprint::of_json_fields(&json!({}), &["/a"]),
            Fingerprint::of_json_fields(&json!({"a": null}), &["/a"])
        );
    }
}
