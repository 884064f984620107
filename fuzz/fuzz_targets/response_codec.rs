//! The stored-response codec: decoding arbitrary bytes never panics, and whatever decodes
//! re-encodes to bytes that decode to the same response.
#![no_main]

use bytes::Bytes;
use idempotency_tower::StoredResponse;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let bytes = Bytes::copy_from_slice(data);
    if let Ok(response) = StoredResponse::decode(&bytes) {
        let again = StoredResponse::decode(&response.encode()).expect("re-encoded decodes");
        assert_eq!(again, response);
    }
});
