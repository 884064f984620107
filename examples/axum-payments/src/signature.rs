//! The payment gateway's callback signature: HMAC-SHA256 of the body with a shared secret,
//! hex, in `X-Signature: sha256=<hex>`. The service checks it before the callback's key is
//! claimed ([`IdempotencyLayerBuilder::verify`](idempotency_tower::IdempotencyLayerBuilder::verify)),
//! so a forged callback carrying a real trade number neither runs nor takes its key.

use bytes::Bytes;
use hmac::{Hmac, Mac};
use http::request::Parts;
use sha2::Sha256;

/// The header the gateway signs with.
pub const SIGNATURE_HEADER: &str = "x-signature";

/// The environment variable holding the shared secret (callbacks are not checked without it).
pub const CALLBACK_SECRET: &str = "CALLBACK_SECRET";

/// The signature of `body` under `secret`: `sha256=` and the HMAC-SHA256 in hex.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    format!(
        "sha256={}",
        hex::encode(mac(secret, body).finalize().into_bytes())
    )
}

fn mac(secret: &[u8], body: &[u8]) -> Hmac<Sha256> {
    // HMAC takes keys of any length.
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap_or_else(|_| unreachable!());
    mac.update(body);
    mac
}

/// Checks a callback's signature: `Err` says why it is refused (401).
pub fn check(secret: &[u8], parts: &Parts, body: &Bytes) -> Result<(), String> {
    let header = parts
        .headers
        .get(SIGNATURE_HEADER)
        .ok_or_else(|| format!("the callback is not signed ({SIGNATURE_HEADER})"))?;
    let given = header
        .to_str()
        .ok()
        .and_then(|value| value.strip_prefix("sha256="))
        .and_then(|hex_text| hex::decode(hex_text).ok())
        .ok_or_else(|| format!("{SIGNATURE_HEADER} is not sha256=<hex>"))?;
    // Compared in constant time.
    mac(secret, body)
        .verify_slice(&given)
        .map_err(|_| "the callback's signature does not match".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(signature: Option<&str>) -> Parts {
        let mut request = http::Request::builder();
        if let Some(signature) = signature {
            request = request.header(SIGNATURE_HEADER, signature);
        }
        request.body(()).unwrap_or_default().into_parts().0
    }

    #[test]
    fn signatures_check_out() {
        let body = Bytes::from_static(br#"{"trade_no":"T1","order_id":1}"#);
        // RFC 4231 test case 2 pins the HMAC itself.
        assert_eq!(
            sign(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        let good = sign(b"secret", &body);
        assert_eq!(check(b"secret", &parts(Some(&good)), &body), Ok(()));
        assert!(check(b"other", &parts(Some(&good)), &body).is_err());
        assert!(check(b"secret", &parts(None), &body).is_err());
        assert!(check(b"secret", &parts(Some("sha256=zz")), &body).is_err());
        let tampered = Bytes::from_static(br#"{"trade_no":"T1","order_id":2}"#);
        assert!(check(b"secret", &parts(Some(&good)), &tampered).is_err());
    }
}
