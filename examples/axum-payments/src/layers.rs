//! The idempotency layers in front of the two POST routes, as builders: built plain
//! (`build()`, the record in the layer's store) or transactional (`build_transactional()`,
//! the record in the request's own SQL transaction).

use std::sync::Arc;

use idempotency_core::Store;
use idempotency_tower::{Callback, IdempotencyLayer, IdempotencyLayerBuilder, ScopeChosen};

use super::callers::Callers;
use super::signature;

/// Namespace of `POST /orders` keys.
pub const ORDERS_NAMESPACE: &str = "payments.orders";

/// Namespace of `POST /payments/callback` keys (trade numbers).
pub const CALLBACK_NAMESPACE: &str = "payments.callback";

/// `POST /orders` (and nothing else: it may wrap the whole router), the API preset: the
/// `Idempotency-Key` header is required (400 without it); keys are scoped per caller (the
/// [`Callers`] its bearer token names: one caller never gets another's stored order, and an
/// order without a caller is refused 401); the fingerprint is the default one (method, path and
/// body bytes), so the same key with another body is 422. A duplicate while the first is in
/// flight gets 409 + `Retry-After`.
pub fn orders_layer_builder<S: Store>(
    store: S,
    callers: Callers,
) -> IdempotencyLayerBuilder<S, ScopeChosen> {
    IdempotencyLayer::builder(store)
        .principal(move |parts| callers.caller(&parts.headers))
        .namespace(ORDERS_NAMESPACE)
        .methods([http::Method::POST])
        .only_paths(["/orders"])
}

/// `POST /payments/callback` (and nothing else), the callback preset: the gateway sends no
/// header, so the key is the body's `trade_no` (a body without it, or that is not JSON, is
/// 400); only 2xx answers are stored, so a callback answered 404 (the order not committed yet)
/// runs again on the gateway's identical retry; a duplicate in flight waits for the first and
/// gets its answer. The fingerprint is the canonical `trade_no` and `order_id`, so a gateway
/// that re-signs or re-serialises the body in another field order is still a duplicate; a
/// conflicting callback (the same trade for another order) gets the stored success, logged at
/// WARN and counted. This gateway sends one notice per trade; one that also notifies refunds
/// names its status field too (`Callback::key(..).status("/trade_status")`). With a `secret`,
/// the gateway's signature is checked before the key is claimed (401 otherwise).
pub fn callback_layer_builder<S: Store>(
    store: S,
    secret: Option<Arc<[u8]>>,
) -> IdempotencyLayerBuilder<S, ScopeChosen> {
    let builder = IdempotencyLayer::builder(store)
        .shared_scope()
        .namespace(CALLBACK_NAMESPACE)
        .methods([http::Method::POST])
        .only_paths(["/payments/callback"])
        .callback(Callback::key("/trade_no").fields(["/trade_no", "/order_id"]));
    match secret {
        Some(secret) => builder.verify(move |parts, body| signature::check(&secret, parts, body)),
        None => builder,
    }
}

/// [`orders_layer_builder`], built.
pub fn orders_layer<S: Store>(store: S, callers: Callers) -> IdempotencyLayer<S> {
    orders_layer_builder(store, callers).build()
}

/// [`callback_layer_builder`] without a signature check, built.
pub fn callback_layer<S: Store>(store: S) -> IdempotencyLayer<S> {
    callback_layer_builder(store, None).build()
}
