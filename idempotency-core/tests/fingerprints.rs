//! Fingerprints: fields framed apart, and the digests stored records keep (pinned).

use idempotency_core::Fingerprint;
use serde_json::json;

#[test]
fn fields_do_not_collide_by_concatenation() {
    assert_ne!(
        Fingerprint::of_request("POST", "/ab", b"c"),
        Fingerprint::of_request("POST", "/a", b"bc")
    );
}

/// Stored records keep these digests: a change here makes every record written before it
/// a mismatch. Values computed apart from this crate: the framing written out in Python,
/// hashed by the `blake3` package (`scripts/digest_pins.py`).
#[test]
fn digests_are_stable() {
    let hex = |f: Fingerprint| f.to_hex();
    assert_eq!(
        hex(Fingerprint::of_request(
            "POST",
            "/orders?x=1",
            br#"{"amount":1}"#
        )),
        "8df2d34eaaaa334f4cf882aefadf903c25507ef79dd802e1df7111ef69d9a37b"
    );
    assert_eq!(
        hex(Fingerprint::of_request("PUT", "/p", &[5u8; 300])),
        "ff410e6e4bd42e8fc3a3c8bf09a3314d81c3a8349b29e7d51c858af4707f4a76"
    );
    let body = json!({"trade_no": "T-1", "order_id": 1, "t": 9});
    assert_eq!(
        hex(Fingerprint::of_json_fields(
            &body,
            &["/trade_no", "/order_id", "/none"]
        )),
        "5cc96091b5c54100e49d5876a3ac202d82daef4fc00f8cd9fc7a98be7d3b8d02"
    );
    for (len, pin) in [
        (
            127,
            "f1ec5b0c042693ab7291bec2e9f4f0be5f0ce3e76af32901c7350ed4a7e6998a",
        ),
        (
            128,
            "e4d01cb60016aad127ede42e4e737f9a44eabeb63a999e828d0011ae8232354e",
        ),
        (
            200,
            "1c956b1710b558e02e79cd353b9359504607c16dd4e99b5a1da3ab4e2581b770",
        ),
        (
            16_500,
            "f8e2c6ff571d11a0deebd9612263690dc9c42af43cde94fe2563e7b50c93f0b3",
        ),
    ] {
        assert_eq!(
            hex(Fingerprint::of_bytes(&vec![1u8; len])),
            pin,
            "{len} bytes"
        );
    }
    let mut many = Fingerprint::builder();
    for at in 0..40u8 {
        many.field(b"field", &vec![at; usize::from(at) * 3]);
    }
    assert_eq!(
        hex(many.finish()),
        "2d08bf6d026456d5c5de53006646cde1ea697eb526ac381638ff203ae245aaa3"
    );
}

#[test]
fn absent_differs_from_null() {
    assert_ne!(
        Fingerprint::of_json_fields(&json!({}), &["/a"]),
        Fingerprint::of_json_fields(&json!({"a": null}), &["/a"])
    );
}
