//! What a layer answers instead of the handler: a replay of the stored response, or a refusal.

use http::{HeaderValue, Response};
use http_body::Body;
use idempotency_core::Outcome;

use crate::body::ResponseBody;
use crate::codec::{DecodeError, StoredResponse};
use crate::headers::IDEMPOTENT_REPLAYED;
use crate::idempotency::config::Settings;
use crate::refusal::{Refusal, RefusalKind};

/// The replayed response for a stored outcome, with `Idempotent-Replayed: true`. Its header map
/// has room for that field and the `Content-Length` the server adds, so that neither grows it.
pub(crate) fn replay<B: Body>(outcome: &Outcome) -> Result<Response<ResponseBody<B>>, DecodeError> {
    let stored = StoredResponse::decode_with_room(&outcome.body, 2)?;
    let mut response = Response::new(ResponseBody::buffered(stored.body, stored.trailers));
    *response.status_mut() = stored.status;
    *response.headers_mut() = stored.headers;
    response
        .headers_mut()
        .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    tracing::debug!(status = response.status().as_u16(), "replayed");
    Ok(response)
}

/// Renders a refusal, logs and counts it.
pub(crate) fn refuse<B: Body>(settings: &Settings, refusal: Refusal) -> Response<ResponseBody<B>> {
    let namespace = settings.scope.namespace();
    tracing::info!(namespace, reason = refusal.kind.slug(), detail = %refusal.detail, "idempotency refusal");
    settings.counters.refused(namespace, refusal.kind);
    settings
        .renderer
        .render(&refusal)
        .map(|body| ResponseBody::buffered(body, None))
}

/// The refusal of a duplicate whose first request is still running.
pub(crate) fn in_flight(retry_after: std::time::Duration) -> Refusal {
    Refusal::new(
        RefusalKind::InFlight,
        "a request with this idempotency key is still being processed",
    )
    .with_retry_after(retry_after)
}

/// The refusal of a key used with another payload.
pub(crate) fn mismatch() -> Refusal {
    Refusal::new(
        RefusalKind::Mismatch,
        "this idempotency key was already used with a different request",
    )
}

/// Logs (WARN, target `idempotency`, with the record's id) and counts
/// ([`idempotency_core::metrics::CONFLICTS`]) a conflict answered with the stored response.
pub(crate) fn report_conflict(settings: &Settings, key: &idempotency_core::StorageKey) {
    tracing::warn!(
        target: "idempotency",
        namespace = settings.scope.namespace(),
        record = %key.to_hex(),
        "a request reused a key with another payload (a conflicting notification); \
         answering with the stored response, check this record"
    );
    settings.counters.conflicted();
}

/// Marks the record a request with another payload met ([`Store::mark_conflict`]), so that
/// reconciliation lists it (`idempotency conflicts`), within `timeout`. A failure is
/// logged (WARN) and changes nothing of the answer.
///
/// [`Store::mark_conflict`]: idempotency_core::Store::mark_conflict
pub(crate) async fn mark_conflict<S: idempotency_core::Store>(
    store: &S,
    timeout: std::time::Duration,
    namespace: &str,
    key: &idempotency_core::StorageKey,
) {
    let error = match tokio::time::timeout(timeout, store.mark_conflict(key)).await {
        Ok(Ok(_)) => return,
        Ok(Err(error)) => error,
        Err(_) => idempotency_core::StoreError::Timeout(timeout),
    };
    tracing::warn!(
        target: "idempotency",
        namespace,
        record = %key.to_hex(),
        %error,
        "the conflict could not be marked on its record; the answer stands"
    );
}

/// The refusal of a request whose store failed (fail-closed).
pub(crate) fn unavailable(settings: &Settings) -> Refusal {
    Refusal::new(
        RefusalKind::StoreUnavailable,
        "the idempotency store is unavailable; retry later",
    )
    .with_retry_after(settings.unavailable_retry_after)
}

/// The replay of `outcome`, or, if it cannot be decoded, a refusal as for a failed store.
#[cfg(any(feature = "sql", feature = "steps"))]
pub(crate) fn replay_or_refuse<B: Body>(
    settings: &Settings,
    outcome: &Outcome,
) -> Response<ResponseBody<B>> {
    replay(outcome).unwrap_or_else(|error| {
        tracing::error!(%error, "stored response could not be decoded");
        refuse(settings, unavailable(settings))
    })
}
