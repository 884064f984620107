//! What a key's request is fingerprinted by.

use std::sync::Arc;

use bytes::Bytes;
use http::HeaderName;
use http::request::Parts;
use idempotency_core::{Fingerprint, canonical_json};
use serde_json::Value;

use crate::json::LazyJson;

/// A user fingerprint function over the request head and the collected body.
pub type FingerprintFn = dyn Fn(&Parts, &Bytes) -> Fingerprint + Send + Sync + 'static;

/// What must not change between retries of one key. A retry with another fingerprint is
/// refused with 422 and the stored record is left untouched.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum FingerprintSource {
    /// Method, path and query, and the body bytes ([`Fingerprint::of_request`]). The default.
    #[default]
    Request,
    /// Method, path (not the query: gateways often sign or timestamp it per attempt) and the
    /// selected fields of a JSON body (JSON Pointers), canonicalised so field order, whitespace
    /// and other fields do not matter. A body that is not JSON is refused (400), and so is a
    /// selected field holding an integer beyond 64 bits (read as a float, it would lose the
    /// digits that tell two requests apart).
    JsonFields(Arc<[String]>),
    /// Method, path (not the query) and the whole JSON body less these top-level fields
    /// (a gateway's per-attempt `sign`, `notify_time`…), canonicalised so field order and
    /// whitespace do not matter. A body that is not JSON is refused (400). The callback
    /// preset's default, with [`PER_ATTEMPT_FIELDS`](crate::PER_ATTEMPT_FIELDS).
    JsonBodyWithout(Arc<[String]>),
    /// Method, path and query, and the values of the selected headers. The body is not read
    /// (with a header key, the request body streams to the handler untouched).
    Headers(Arc<[HeaderName]>),
    /// A user function.
    Custom(Arc<FingerprintFn>),
}

impl std::fmt::Debug for FingerprintSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Request => f.write_str("Request"),
            Self::JsonFields(fields) => f.debug_tuple("JsonFields").field(fields).finish(),
            Self::JsonBodyWithout(fields) => {
                f.debug_tuple("JsonBodyWithout").field(fields).finish()
            }
            Self::Headers(names) => f.debug_tuple("Headers").field(names).finish(),
            Self::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

fn target(parts: &Parts) -> &str {
    parts
        .uri
        .path_and_query()
        .map_or_else(|| parts.uri.path(), |target| target.as_str())
}

impl FingerprintSource {
    /// [`JsonFields`](Self::JsonFields) of these JSON Pointers.
    pub fn json_fields<P: Into<String>>(pointers: impl IntoIterator<Item = P>) -> Self {
        Self::JsonFields(pointers.into_iter().map(Into::into).collect())
    }

    /// The JSON Pointers this fingerprint reads from the body.
    pub(crate) fn json_pointers(&self) -> impl Iterator<Item = &str> {
        const WHOLE_BODY: &[&str] = &[""];
        let (fields, whole): (&[String], &[&str]) = match self {
            Self::JsonFields(fields) => (&fields[..], &[]),
            Self::JsonBodyWithout(_) => (&[], WHOLE_BODY),
            _ => (&[], &[]),
        };
        fields
            .iter()
            .map(String::as_str)
            .chain(whole.iter().copied())
    }

    /// Whether the body must be collected.
    pub(crate) fn needs_body(&self) -> bool {
        !matches!(self, Self::Headers(_))
    }

    /// The fingerprint, or why the body could not be read for it.
    pub(crate) fn compute(
        &self,
        parts: &Parts,
        body: &Bytes,
        json: &mut LazyJson<'_>,
    ) -> Result<Fingerprint, String> {
        match self {
            Self::Request => Ok(Fingerprint::of_request(
                parts.method.as_str(),
                target(parts),
                body,
            )),
            Self::JsonFields(fields) => {
                // Method and path, then the fields as `FingerprintBuilder::json_fields` adds
                // them from the parsed body, from the selected fields alone, each canonical
                // form written into one reused buffer.
                let mut builder = Fingerprint::builder();
                builder
                    .field(b"method", parts.method.as_str().as_bytes())
                    .field(b"path", parts.uri.path().as_bytes());
                let mut canonical = Vec::new();
                for pointer in fields.iter() {
                    let field = json.field(pointer)?;
                    if let Some(field) = field {
                        if holds_inexact_integer(field) {
                            return Err(format!(
                                "the field {pointer} holds an integer beyond 64 bits, which \
                                 cannot be compared exactly; send it as a string"
                            ));
                        }
                        canonical.clear();
                        if write_canonical(field, &mut canonical).is_err() {
                            canonical.clear();
                            canonical.extend_from_slice(canonical_json(field).as_bytes());
                        }
                    }
                    builder.json_field(pointer, field.map(|_| &canonical[..]));
                }
                Ok(builder.finish())
            }
            Self::JsonBodyWithout(left_out) => {
                let mut builder = Fingerprint::builder();
                builder
                    .field(b"method", parts.method.as_str().as_bytes())
                    .field(b"path", parts.uri.path().as_bytes());
                let mut canonical = Vec::new();
                match json.field("")? {
                    Some(Value::Object(members)) => write_canonical_object(
                        members
                            .iter()
                            .filter(|(name, _)| !left_out.iter().any(|out| out == *name)),
                        &mut canonical,
                    ),
                    Some(other) => write_canonical(other, &mut canonical),
                    None => Ok(()),
                }
                .map_err(|error| error.to_string())?;
                builder.field(b"body-without", &canonical);
                Ok(builder.finish())
            }
            Self::Headers(names) => {
                let mut builder = Fingerprint::builder();
                builder
                    .field(b"method", parts.method.as_str().as_bytes())
                    .field(b"target", target(parts).as_bytes());
                for name in names.iter() {
                    builder.field(b"header", name.as_str().as_bytes());
                    for value in parts.headers.get_all(name) {
                        builder.field(b"value", value.as_bytes());
                    }
                }
                Ok(builder.finish())
            }
            Self::Custom(compute) => Ok(compute(parts, body)),
        }
    }
}

/// Whether `value` holds an integer that `serde_json` read as a float because it does not fit
/// 64 bits (its digits beyond 2^53 are lost, so distinct numbers would fingerprint alike).
fn holds_inexact_integer(value: &Value) -> bool {
    /// 2^53: from here on, not every integer is a float.
    const EXACT_FLOAT_INTEGERS: f64 = 9_007_199_254_740_992.0;
    match value {
        Value::Number(number) => number
            .as_f64()
            .filter(|_| !(number.is_i64() || number.is_u64()))
            .is_some_and(|float| float.fract() == 0.0 && float.abs() >= EXACT_FLOAT_INTEGERS),
        Value::Array(items) => items.iter().any(holds_inexact_integer),
        Value::Object(map) => map.values().any(holds_inexact_integer),
        _ => false,
    }
}

/// Appends [`canonical_json`]`(value)` to `out` (object keys sorted, compact; keys and scalars
/// as `serde_json` writes them), without the intermediate strings.
pub(crate) fn write_canonical(value: &Value, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
    match value {
        Value::Object(map) => write_canonical_object(map.iter(), out)?,
        Value::Array(items) => {
            out.push(b'[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                write_canonical(item, out)?;
            }
            out.push(b']');
        }
        scalar => serde_json::to_writer(&mut *out, scalar)?,
    }
    Ok(())
}

/// Appends the canonical form of an object made of `members` (sorted by name, compact).
fn write_canonical_object<'v>(
    members: impl Iterator<Item = (&'v String, &'v Value)>,
    out: &mut Vec<u8>,
) -> Result<(), serde_json::Error> {
    let mut entries: Vec<_> = members.collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    out.push(b'{');
    for (index, (key, field)) in entries.into_iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut *out, key)?;
        out.push(b':');
        write_canonical(field, out)?;
    }
    out.push(b'}');
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use http::Request;

    fn fp(
        source: &FingerprintSource,
        uri: &str,
        header: Option<&str>,
        body: &str,
    ) -> Result<Fingerprint, String> {
        let mut request = Request::post(uri);
        if let Some(value) = header {
            request = request.header("x-amount", value);
        }
        let parts = request.body(()).unwrap().into_parts().0;
        let body = Bytes::copy_from_slice(body.as_bytes());
        let plan = crate::json::JsonPlan::new(source.json_pointers());
        let mut json = LazyJson::new(&plan, &body);
        source.compute(&parts, &body, &mut json)
    }

    #[test]
    fn request_fingerprint_covers_target_and_body() {
        let s = FingerprintSource::Request;
        let base = fp(&s, "/a?x=1", None, "b").unwrap();
        assert_eq!(base, fp(&s, "/a?x=1", Some("9"), "b").unwrap());
        assert_ne!(base, fp(&s, "/a?x=2", None, "b").unwrap());
        assert_ne!(base, fp(&s, "/a?x=1", None, "c").unwrap());
    }

    #[test]
    fn json_fields_ignore_order_and_other_fields() {
        let s = FingerprintSource::JsonFields(Arc::from(vec!["/amount".to_owned()]));
        let a = fp(&s, "/pay", None, r#"{"amount":1,"ts":1}"#).unwrap();
        assert_eq!(a, fp(&s, "/pay", None, r#"{"ts":2, "amount":1}"#).unwrap());
        assert_ne!(a, fp(&s, "/pay", None, r#"{"amount":2}"#).unwrap());
        assert_ne!(a, fp(&s, "/refund", None, r#"{"amount":1}"#).unwrap());
        assert_eq!(a, fp(&s, "/pay?sig=2", None, r#"{"amount":1}"#).unwrap());
        assert!(fp(&s, "/pay", None, "not json").is_err());
    }

    #[test]
    fn json_fields_equal_the_core_fingerprint_of_the_parsed_body() {
        // The layer reads only the selected fields; the fingerprint must stay what
        // `FingerprintBuilder::json_fields` makes of the whole parsed body (stored records keep
        // it).
        let pointers = [
            "/trade_no",
            "/order_id",
            "/items/0/sku",
            "/missing",
            "/a~1b",
            "",
        ];
        let s = FingerprintSource::JsonFields(Arc::from(
            pointers.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
        ));
        for body in [
            r#"{"trade_no":"T1","order_id":42,"items":[{"sku":"a","qty":2}],"a/b":null}"#,
            r#"{"order_id":42.50,"trade_no":"T1","items":[],"extra":{"deep":[1,2,3]}}"#,
            r#"{"trade_no":"T1","trade_no":"T2","order_id":1e3,"items":{"0":{"sku":1}}}"#,
            r#"{"items":[{"sku":{"z":1,"a":[true,null]}}],"order_id":-0,"trade_no":"\u00e9"}"#,
            "[]",
        ] {
            let value: serde_json::Value = serde_json::from_str(body).unwrap();
            let expected = Fingerprint::builder()
                .field(b"method", b"POST")
                .field(b"path", b"/pay")
                .json_fields(&value, &pointers)
                .finish();
            assert_eq!(
                fp(&s, "/pay?sig=1", None, body).unwrap(),
                expected,
                "{body}"
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn canonical_writing_equals_the_core_canonical_form(value in crate::json::tests::json()) {
            let mut out = Vec::new();
            write_canonical(&value, &mut out).unwrap();
            proptest::prop_assert_eq!(String::from_utf8(out).unwrap(), canonical_json(&value));
        }
    }

    #[test]
    fn body_without_per_attempt_fields_ignores_signature_time_order_and_spacing() {
        let s = FingerprintSource::JsonBodyWithout(Arc::from(vec![
            "sign".to_owned(),
            "notify_time".to_owned(),
        ]));
        let a = fp(
            &s,
            "/notify",
            None,
            r#"{"trade_no":"T1","amount":"9.90","sign":"a","notify_time":"1"}"#,
        )
        .unwrap();
        let resigned = r#"{ "notify_time" : "2", "amount":"9.90",  "sign":"b","trade_no":"T1" }"#;
        assert_eq!(a, fp(&s, "/notify?t=2", None, resigned).unwrap());
        let other_amount = r#"{"trade_no":"T1","amount":"19.90","sign":"a","notify_time":"1"}"#;
        assert_ne!(a, fp(&s, "/notify", None, other_amount).unwrap());
        let more = r#"{"trade_no":"T1","amount":"9.90","refund_fee":"9.90"}"#;
        assert_ne!(a, fp(&s, "/notify", None, more).unwrap());
        assert!(fp(&s, "/notify", None, "trade_no=T1").is_err());
    }

    #[test]
    fn headers_fingerprint_ignores_body() {
        let s = FingerprintSource::Headers(Arc::from(vec![HeaderName::from_static("x-amount")]));
        let a = fp(&s, "/pay", Some("1"), "x").unwrap();
        assert_eq!(a, fp(&s, "/pay", Some("1"), "y").unwrap());
        assert_ne!(a, fp(&s, "/pay", Some("2"), "x").unwrap());
        assert_ne!(a, fp(&s, "/pay", None, "x").unwrap());
    }
}
