//! Key parsing: any header value (sf-string or bare token) and any text either yield a key of
//! 1–255 visible ASCII characters or an error; never a panic.
#![no_main]

use idempotency_core::{IdempotencyKey, MAX_KEY_LEN};
use libfuzzer_sys::fuzz_target;

fn check(key: &IdempotencyKey) {
    let text = key.as_str();
    assert!(!text.is_empty() && text.len() <= MAX_KEY_LEN);
    assert!(text.bytes().all(|b| b.is_ascii_graphic()));
    // A parsed key parses again to itself.
    assert_eq!(IdempotencyKey::parse(text).ok().as_ref(), Some(key));
}

fuzz_target!(|data: &[u8]| {
    if let Ok(key) = IdempotencyKey::from_header(data) {
        check(&key);
    }
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(key) = IdempotencyKey::parse(text)
    {
        check(&key);
    }
    if let Ok(value) = http::HeaderValue::from_bytes(data) {
        let mut headers = http::HeaderMap::new();
        headers.insert(idempotency_tower::IDEMPOTENCY_KEY, value);
        if let Ok(Some(key)) =
            idempotency_tower::key_from_headers(&headers, &idempotency_tower::IDEMPOTENCY_KEY)
        {
            check(&key);
        }
    }
});
