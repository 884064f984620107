//! The idempotency layers in front of the two POST routes.

use std::time::Duration;

use idempotency_core::Store;
use idempotency_tower::IdempotencyLayer;

/// Namespace of `POST /orders` keys.
pub const ORDERS_NAMESPACE: &str = "payments.orders";

/// Namespace of `POST /payments/callback` keys (trade numbers).
pub const CALLBACK_NAMESPACE: &str = "payments.callback";

/// How long a duplicate callback waits for the first one to finish before it gets 409.
pub const CALLBACK_WAIT: Duration = Duration::from_secs(5);

/// `POST /orders` (and nothing else: it may wrap the whole router): the `Idempotency-Key`
/// header is required (400 without it); the fingerprint
/// is the default one (method, path and body bytes), so the same key with another body is 422.
/// A duplicate while the first is in flight gets 409 + `Retry-After`.
pub fn orders_layer<S: Store>(store: S) -> IdempotencyLayer<S> {
    IdempotencyLayer::builder(store)
        .namespace(ORDERS_NAMESPACE)
        .methods([http::Method::POST])
        .only_paths(["/orders"])
        .build()
}

/// `POST /payments/callback` (and nothing else): the gateway sends no header, so the key is the body's `trade_no`
/// (required: a body without it, or that is not JSON, is 400). The fingerprint is the canonical
/// `trade_no` and `order_id`, so a gateway that re-serialises the body in another field order
/// is still a duplicate. A duplicate arriving while the first is running waits for it (up to
/// [`CALLBACK_WAIT`]) and gets its answer replayed: the gateway sees 200 every time.
pub fn callback_layer<S: Store>(store: S) -> IdempotencyLayer<S> {
    IdempotencyLayer::builder(store)
        .namespace(CALLBACK_NAMESPACE)
        .methods([http::Method::POST])
        .only_paths(["/payments/callback"])
        .key_from_json("/trade_no")
        .fingerprint_json_fields(["/trade_no", "/order_id"])
        .wait_in_flight(CALLBACK_WAIT)
        .build()
}
