//! Ready-made signature checks for [`verify`](crate::IdempotencyLayerBuilder::verify), so a
//! gateway's callback needs no hand-written cryptography (feature `hmac`).
//!
//! Both compare in constant time and answer `Err(detail)` (401, or gRPC `UNAUTHENTICATED`,
//! nothing claimed) for a missing, malformed or wrong signature.
//!
//! - [`hmac_sha256`]: an HMAC-SHA256 of the body in one header, hex or base64, optionally
//!   prefixed `sha256=` (GitHub, Shopify, many payment gateways).
//! - [`standard_webhooks`]: [Standard Webhooks](https://www.standardwebhooks.com/)
//!   (`webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64>` over
//!   `id.timestamp.body`, 5-minute window); key the layer by `webhook-id`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use bytes::Bytes;
use hmac::{Hmac, Mac};
use http::HeaderName;
use http::request::Parts;
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// How far a Standard Webhooks timestamp may be from now: 5 minutes, as the specification
/// recommends (a replayed old message is refused).
pub const STANDARD_WEBHOOKS_TOLERANCE: Duration = Duration::from_secs(5 * 60);

/// A check of an HMAC-SHA256 of the body, keyed by `secret`, carried in header `header` as hex
/// or base64 (standard alphabet, padded or not), optionally prefixed `sha256=`.
///
/// ```
/// use hmac::{Hmac, Mac};
/// use http::HeaderName;
/// use idempotency_core::MemoryStore;
/// use idempotency_tower::{IdempotencyLayer, verify};
///
/// let layer = IdempotencyLayer::builder(MemoryStore::new())
///     .callback("/trade_no")
///     .verify(verify::hmac_sha256(
///         HeaderName::from_static("x-signature"),
///         b"gateway-secret".to_vec(),
///     ))
///     .shared_scope()
///     .build();
/// # let _ = layer;
///
/// // What the gateway sends, and what the check accepts:
/// let body = br#"{"trade_no":"T1"}"#;
/// let mut mac = Hmac::<sha2::Sha256>::new_from_slice(b"gateway-secret").unwrap();
/// mac.update(body);
/// let signature = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
/// let check = verify::hmac_sha256(HeaderName::from_static("x-signature"), b"gateway-secret".to_vec());
/// let request = http::Request::post("/notify").header("x-signature", signature).body(()).unwrap();
/// assert_eq!(check(&request.into_parts().0, &bytes::Bytes::from_static(body)), Ok(()));
/// ```
pub fn hmac_sha256(
    header: HeaderName,
    secret: impl Into<Vec<u8>>,
) -> impl Fn(&Parts, &Bytes) -> Result<(), String> + Send + Sync + 'static {
    let secret = secret.into();
    move |parts, body| {
        let value = parts
            .headers
            .get(&header)
            .ok_or_else(|| format!("no {header} header"))?;
        let text = value
            .to_str()
            .map_err(|_| format!("the {header} header is not text"))?
            .trim();
        let text = text.strip_prefix("sha256=").unwrap_or(text);
        let signature = decode_hex_or_base64(text)
            .ok_or_else(|| format!("the {header} header is neither hex nor base64"))?;
        let mut mac = keyed(&secret);
        mac.update(body);
        mac.verify_slice(&signature)
            .map_err(|_| format!("the {header} signature does not match the body"))
    }
}

/// A check of a [Standard Webhooks](https://www.standardwebhooks.com/) signature: HMAC-SHA256
/// keyed by `secret` (`whsec_<base64>`, or the base64 alone) over `id.timestamp.body`, from
/// headers `webhook-id`, `webhook-timestamp` (Unix seconds, within
/// [`STANDARD_WEBHOOKS_TOLERANCE`] of now) and `webhook-signature` (space-separated
/// `v1,<base64>` entries, any of which may match: keys are rotated that way). `Err` if the
/// secret is not base64.
///
/// ```
/// use http::HeaderName;
/// use idempotency_core::MemoryStore;
/// use idempotency_tower::{IdempotencyLayer, verify};
///
/// let layer = IdempotencyLayer::builder(MemoryStore::new())
///     .namespace("webhooks")
///     .key_header(HeaderName::from_static("webhook-id"))
///     .verify(verify::standard_webhooks("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap())
///     .shared_scope()
///     .build();
/// # let _ = layer;
/// ```
pub fn standard_webhooks(
    secret: &str,
) -> Result<impl Fn(&Parts, &Bytes) -> Result<(), String> + Send + Sync + 'static, String> {
    let encoded = secret.strip_prefix("whsec_").unwrap_or(secret);
    let key = STANDARD
        .decode(encoded)
        .map_err(|error| format!("the Standard Webhooks secret is not base64: {error}"))?;
    Ok(move |parts: &Parts, body: &Bytes| {
        let header = |name: &str| {
            parts
                .headers
                .get(name)
                .and_then(|value| value.to_str().ok())
                .ok_or_else(|| format!("no {name} header"))
        };
        let id = header("webhook-id")?;
        let timestamp = header("webhook-timestamp")?;
        let signatures = header("webhook-signature")?;
        let sent: u64 = timestamp
            .parse()
            .map_err(|_| "webhook-timestamp is not a number of seconds".to_owned())?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        if now.abs_diff(sent) > STANDARD_WEBHOOKS_TOLERANCE.as_secs() {
            return Err("webhook-timestamp is outside the 5-minute window".to_owned());
        }
        let mut mac = keyed(&key);
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.as_bytes());
        mac.update(b".");
        mac.update(body);
        let matched = signatures
            .split(' ')
            .filter_map(|entry| entry.strip_prefix("v1,"))
            .filter_map(|encoded| STANDARD.decode(encoded).ok())
            .any(|signature| mac.clone().verify_slice(&signature).is_ok());
        if matched {
            Ok(())
        } else {
            Err("no webhook-signature matches the message".to_owned())
        }
    })
}

fn keyed(secret: &[u8]) -> HmacSha256 {
    // HMAC takes a key of any length.
    match HmacSha256::new_from_slice(secret) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC accepts keys of every length"),
    }
}

/// A SHA-256-sized signature as 64 hex digits, else as base64 (padded or not).
fn decode_hex_or_base64(text: &str) -> Option<Vec<u8>> {
    if text.len() == 64
        && let Ok(bytes) = hex::decode(text)
    {
        return Some(bytes);
    }
    STANDARD
        .decode(text)
        .or_else(|_| STANDARD_NO_PAD.decode(text))
        .ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn parts(headers: &[(&str, String)]) -> Parts {
        let mut request = http::Request::post("/notify");
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        request.body(()).unwrap().into_parts().0
    }

    fn mac(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        let mut mac = keyed(key);
        for part in parts {
            mac.update(part);
        }
        mac.finalize().into_bytes().to_vec()
    }

    #[test]
    fn hmac_sha256_accepts_hex_base64_and_the_prefix_and_refuses_the_rest() {
        let body = Bytes::from_static(br#"{"trade_no":"T1","total_amount":"9.90"}"#);
        let check = hmac_sha256(HeaderName::from_static("x-signature"), b"k1".to_vec());
        let signature = mac(b"k1", &[&body]);
        for value in [
            hex::encode(&signature),
            format!("sha256={}", hex::encode(&signature)),
            STANDARD.encode(&signature),
            STANDARD_NO_PAD.encode(&signature),
            format!("sha256={}", STANDARD.encode(&signature)),
        ] {
            assert_eq!(
                check(&parts(&[("x-signature", value.clone())]), &body),
                Ok(()),
                "{value}"
            );
        }
        let other_key = hex::encode(mac(b"k2", &[&body]));
        let tampered = Bytes::from_static(br#"{"trade_no":"T1","total_amount":"0.01"}"#);
        let good = hex::encode(&signature);
        assert!(check(&parts(&[("x-signature", other_key)]), &body).is_err());
        assert!(check(&parts(&[("x-signature", good)]), &tampered).is_err());
        assert!(check(&parts(&[("x-signature", "not base64!".into())]), &body).is_err());
        let missing = check(&parts(&[]), &body).unwrap_err();
        assert!(missing.contains("x-signature"), "{missing}");
    }

    #[test]
    fn standard_webhooks_checks_id_timestamp_body_and_the_window() {
        let key = b"standard-webhooks-key".to_vec();
        let secret = format!("whsec_{}", STANDARD.encode(&key));
        let check = standard_webhooks(&secret).unwrap();
        let body = Bytes::from_static(br#"{"type":"invoice.paid"}"#);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let signed = |id: &str, at: u64, key: &[u8]| {
            let signature = mac(
                key,
                &[id.as_bytes(), b".", at.to_string().as_bytes(), b".", &body],
            );
            parts(&[
                ("webhook-id", id.to_owned()),
                ("webhook-timestamp", at.to_string()),
                (
                    "webhook-signature",
                    format!(
                        "v1,{} v1,{}",
                        STANDARD.encode([0; 32]),
                        STANDARD.encode(signature)
                    ),
                ),
            ])
        };
        assert_eq!(check(&signed("msg_1", now, &key), &body), Ok(()));
        assert!(check(&signed("msg_1", now, b"another key"), &body).is_err());
        let old = check(&signed("msg_1", now - 3600, &key), &body).unwrap_err();
        assert!(old.contains("window"), "{old}");
        let mut moved = signed("msg_1", now, &key);
        moved.headers.insert("webhook-id", "msg_2".parse().unwrap());
        assert!(check(&moved, &body).is_err(), "the id is signed");
        assert!(
            check(&parts(&[]), &body)
                .unwrap_err()
                .contains("webhook-id")
        );
        assert!(standard_webhooks("whsec_***").is_err());
    }
}
