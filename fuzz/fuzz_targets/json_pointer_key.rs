//! JSON-pointer key extraction through the real layer: any body and any pointer give 200 (a
//! key was found and the handler ran) or a 4xx refusal (400 or 413); never a panic, never a
//! 5xx.
#![no_main]

use std::sync::OnceLock;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use idempotency_core::MemoryStore;
use idempotency_tower::{IdempotencyLayer, RequestBody};
use libfuzzer_sys::fuzz_target;
use tower::{Layer, ServiceExt, service_fn};

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime")
    })
}

fuzz_target!(|data: &[u8]| {
    let split = data.iter().position(|b| *b == b'\n').unwrap_or(data.len());
    let (pointer, body) = data.split_at(split);
    let body = Bytes::copy_from_slice(body.get(1..).unwrap_or_default());
    let pointer = String::from_utf8_lossy(pointer).into_owned();
    let status = runtime().block_on(async move {
        let layer = IdempotencyLayer::builder(MemoryStore::new())
            .shared_scope()
            .key_from_json(pointer)
            .max_body_bytes(4096)
            .build();
        let service = layer.layer(service_fn(|_: Request<RequestBody<Full<Bytes>>>| async {
            Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
        }));
        let request = Request::post("/callback")
            .body(Full::new(body))
            .expect("request");
        service.oneshot(request).await.expect("infallible").status()
    });
    assert!(
        matches!(status.as_u16(), 200 | 400 | 413),
        "unexpected status {status}"
    );
});
