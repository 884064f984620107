//! Guards the sizes of the futures a guarded request boxes.
//!
//! glibc serves blocks of up to 1 024 bytes (on 64-bit) from a per-thread cache; a larger box
//! takes the shared arena's slow path on every request, which the load benchmark showed as a
//! few percent of throughput. These are the futures of the
//! `payments` example's layers (an axum `Router`, a `BoxStore`, one layer around the other),
//! measured in the profile the test runs in (the release build's sizes were the same, by
//! `-Zprint-type-sizes`, with rustc 1.95 on 2026-12-01).

use axum::Router;
use axum::body::Body;
use idempotency_core::{BoxStore, Decision, Fingerprint, MemoryStore};
use idempotency_test::unique_key;
use tower_service::Service;

use super::{IdempotencyLayer, IdempotencyService, execute, gate};
use crate::body::RequestBody;
use crate::guarded::{Exchange, Guarded};

/// The largest block glibc's per-thread cache holds on 64-bit targets.
const CACHED_BLOCK: usize = 1_024;

fn layers() -> (IdempotencyLayer<BoxStore>, IdempotencyLayer<BoxStore>) {
    let store = BoxStore::new(MemoryStore::new());
    let orders = IdempotencyLayer::builder(store.clone())
        .namespace("orders")
        .principal_header(http::HeaderName::from_static("x-tenant-id"))
        .only_paths(["/orders"])
        .build();
    let callback = IdempotencyLayer::builder(store)
        .namespace("callback")
        .shared_scope()
        .only_paths(["/payments/callback"])
        .key_from_json("/trade_no")
        .fingerprint_json_fields(["/trade_no", "/order_id"])
        .wait_in_flight(std::time::Duration::from_secs(5))
        .build();
    (orders, callback)
}

/// A request to `inner` with `body`, its key not read yet.
fn guarded<X: Exchange>(inner: X::Inner, body: X::Body) -> Guarded<X> {
    let parts = http::Request::new(()).into_parts().0;
    Guarded(inner, parts, body, None)
}

#[tokio::test]
async fn boxed_futures_fit_the_allocators_thread_cache() {
    let (orders, callback) = layers();
    let router = Router::new();
    let mut inner = IdempotencyService::new(router.clone(), callback.clone());

    let callback_gated = gate::run::<(_, _, Body), _>(
        callback,
        guarded(router, RequestBody::<Body>::streaming(Body::empty())),
    );
    let orders_gated =
        gate::run::<(_, _, _), _>(orders.clone(), guarded(inner.clone(), Body::empty()));

    let engine = &orders.shared.engine;
    let fingerprint = Fingerprint::of_bytes(b"work");
    let Ok(Decision::Execute(execution)) = engine
        .claim(
            &orders.settings().scope,
            unique_key(),
            &fingerprint,
            idempotency_core::InFlightPolicy::Reject,
        )
        .await
    else {
        panic!("a new key is claimed");
    };
    let request = http::Request::new(RequestBody::streaming(Body::empty()));
    let handler = Box::pin(inner.call(request));
    let work = execute::run_to_end(orders, execution, handler);

    let sizes = [
        (
            "gated request, callback layer",
            size_of_val(&callback_gated),
        ),
        ("gated request, orders layer", size_of_val(&orders_gated)),
        ("handler's work, orders layer", size_of_val(&work)),
    ];
    println!("{sizes:?}");
    for (future, size) in sizes {
        assert!(
            size <= CACHED_BLOCK,
            "the boxed {future} future takes {size} bytes, more than the {CACHED_BLOCK} \
             bytes glibc's per-thread cache serves"
        );
    }
}
