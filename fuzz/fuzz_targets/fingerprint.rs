//! Fingerprints: canonical JSON and selected-field fingerprints over arbitrary JSON and
//! pointers never panic, canonicalisation is idempotent, and field order does not matter.
#![no_main]

use idempotency_core::{Fingerprint, canonical_json};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // First line: pointers separated by '|'; the rest: the body.
    let split = data.iter().position(|b| *b == b'\n').unwrap_or(data.len());
    let (head, body) = data.split_at(split);
    let body = body.get(1..).unwrap_or_default();
    let head = String::from_utf8_lossy(head);
    let pointers: Vec<&str> = head.split('|').collect();
    let _ = Fingerprint::of_request("POST", &head, body);
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return;
    };
    let canonical = canonical_json(&value);
    let reparsed: serde_json::Value =
        serde_json::from_str(&canonical).expect("canonical JSON is JSON");
    assert_eq!(
        canonical_json(&reparsed),
        canonical,
        "canonicalisation is stable"
    );
    let a = Fingerprint::of_json_fields(&value, &pointers);
    let b = Fingerprint::of_json_fields(&reparsed, &pointers);
    assert_eq!(
        a, b,
        "field order and whitespace do not change the fingerprint"
    );
});
