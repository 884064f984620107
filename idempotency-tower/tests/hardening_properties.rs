//! Hostile input, property-tested: header parsing, JSON-pointer key extraction through the
//! layer, and the stored-response codec. Arbitrary input never panics, never answers 5xx, and
//! what is accepted obeys the rules (keys of 1–255 visible ASCII; decoded responses
//! re-encode to themselves).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use idempotency_core::{IdempotencyKey, MAX_KEY_LEN, MemoryStore};
use idempotency_tower::{
    IDEMPOTENCY_KEY, IdempotencyLayer, RequestBody, StoredResponse, key_from_headers,
};
use proptest::prelude::*;
use serde_json::Value;
use tower::{Layer, ServiceExt, service_fn};

fn valid_key(key: &IdempotencyKey) -> bool {
    let text = key.as_str();
    !text.is_empty() && text.len() <= MAX_KEY_LEN && text.bytes().all(|b| b.is_ascii_graphic())
}

/// One request through a fresh layer (memory store) over a handler that answers 200.
fn status_of(layer: IdempotencyLayer<MemoryStore>, request: Request<Full<Bytes>>) -> StatusCode {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let service = layer.layer(service_fn(|_: Request<RequestBody<Full<Bytes>>>| async {
            Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
        }));
        service.oneshot(request).await.unwrap().status()
    })
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,300}".prop_map(Value::String),
        "[!-~]{1,20}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z~/0-9]{0,6}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn pointer() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("/".to_owned()),
        "(/[a-z~/0-9]{0,6}){1,4}",
        "/[0-9]{1,3}",
        ".{0,20}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn any_header_value_parses_or_is_refused(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(value) = HeaderValue::from_bytes(&bytes) {
            let mut headers = HeaderMap::new();
            headers.insert(IDEMPOTENCY_KEY, value);
            if let Ok(Some(key)) = key_from_headers(&headers, &IDEMPOTENCY_KEY) {
                prop_assert!(valid_key(&key), "{key:?}");
            }
        }
        if let Ok(key) = IdempotencyKey::from_header(&bytes) {
            prop_assert!(valid_key(&key));
        }
    }

    #[test]
    fn two_key_values_are_always_refused(a in "[!-~]{1,40}", b in "[!-~]{1,40}") {
        let mut headers = HeaderMap::new();
        headers.append(IDEMPOTENCY_KEY, HeaderValue::from_str(&a).unwrap());
        headers.append(IDEMPOTENCY_KEY, HeaderValue::from_str(&b).unwrap());
        prop_assert!(key_from_headers(&headers, &IDEMPOTENCY_KEY).is_err());
    }

    #[test]
    fn any_stored_response_decode_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let bytes = Bytes::from(bytes);
        if let Ok(decoded) = StoredResponse::decode(&bytes) {
            prop_assert_eq!(StoredResponse::decode(&decoded.encode()).unwrap(), decoded);
        }
    }

    #[test]
    fn corrupted_encodings_never_panic(
        status in 200u16..600,
        headers in prop::collection::vec(("[a-z][a-z0-9-]{0,15}", "[ -~]{0,40}"), 0..8),
        body in prop::collection::vec(any::<u8>(), 0..200),
        trailers in proptest::option::of(prop::collection::vec(("[a-z][a-z0-9-]{0,15}", "[!-~]{0,20}"), 0..3)),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let map = |pairs: &[(String, String)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.append(HeaderName::try_from(name.as_str()).unwrap(), HeaderValue::from_str(value).unwrap());
            }
            map
        };
        let response = StoredResponse {
            status: StatusCode::from_u16(status).unwrap(),
            headers: map(&headers),
            body: Bytes::from(body),
            trailers: trailers.as_deref().map(map),
        };
        let encoded = response.encode();
        prop_assert_eq!(&StoredResponse::decode(&encoded).unwrap(), &response);
        let mut corrupt = encoded.to_vec();
        for (at, byte) in flips {
            let i = at.index(corrupt.len());
            corrupt[i] ^= byte;
        }
        let _ = StoredResponse::decode(&Bytes::from(corrupt));
        let _ = StoredResponse::decode(&encoded.slice(..cut.index(encoded.len())));
    }
}

proptest! {
    // Each case builds a runtime and a layer: fewer cases.
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn any_key_header_through_the_layer_is_200_or_400(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let Ok(value) = HeaderValue::from_bytes(&bytes) else { return Ok(()); };
        let request = Request::post("/pay").header(IDEMPOTENCY_KEY, value.clone()).body(Full::new(Bytes::new())).unwrap();
        let status = status_of(IdempotencyLayer::builder(MemoryStore::new()).shared_scope().build(), request);
        let valid = IdempotencyKey::from_header(value.as_bytes()).is_ok();
        prop_assert_eq!(status, if valid { StatusCode::OK } else { StatusCode::BAD_REQUEST });
    }

    #[test]
    fn any_json_and_pointer_through_the_layer_is_200_or_400(value in json_value(), pointer in pointer()) {
        let body = Bytes::from(serde_json::to_vec(&value).unwrap());
        let expected = match value.pointer(&pointer) {
            Some(Value::String(text)) if IdempotencyKey::parse(text).is_ok() => StatusCode::OK,
            // Integers exact in 64 bits only: a float's text would merge distinct keys.
            Some(Value::Number(n)) if n.is_i64() || n.is_u64() => StatusCode::OK,
            _ => StatusCode::BAD_REQUEST,
        };
        let layer = IdempotencyLayer::builder(MemoryStore::new()).shared_scope().key_from_json(pointer).build();
        let request = Request::post("/callback").body(Full::new(body)).unwrap();
        prop_assert_eq!(status_of(layer, request), expected);
    }

    #[test]
    fn any_body_bytes_with_a_json_key_is_200_400_or_413(body in prop::collection::vec(any::<u8>(), 0..600), pointer in pointer()) {
        let layer = IdempotencyLayer::builder(MemoryStore::new()).shared_scope()
            .key_from_json(pointer)
            .max_body_bytes(512)
            .build();
        let request = Request::post("/callback").body(Full::new(Bytes::from(body))).unwrap();
        let status = status_of(layer, request);
        prop_assert!(matches!(status.as_u16(), 200 | 400 | 413), "{status}");
    }
}
