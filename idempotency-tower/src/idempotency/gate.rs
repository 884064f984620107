//! The decision for a guarded request: read what is needed, claim, then run, replay or refuse.

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body::Body;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use idempotency_core::{Decision, Fingerprint, Outcome, StorageKey, Store, StoreError};
use tower_service::Service;

use super::execute;
use super::layer::IdempotencyLayer;
use super::service::key_refusal;
use super::settings::Settings;
use crate::body::{RequestBody, ResponseBody};
use crate::codec::{DecodeError, StoredResponse};
use crate::collect::{RequestCollectError, collect_request};
use crate::headers::IDEMPOTENT_REPLAYED;
use crate::json::LazyJson;
use crate::policy::InFlightPolicy;
use crate::refusal::{Refusal, RefusalKind};

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

pub(crate) fn too_large(settings: &Settings) -> Refusal {
    Refusal::new(
        RefusalKind::BodyTooLarge,
        format!(
            "the request body is larger than {} bytes",
            settings.max_body_bytes
        ),
    )
}

/// The request body: still streaming, or collected once.
enum Held<B> {
    Streaming(B),
    Buffered(Bytes, Option<HeaderMap>),
}

impl<B> Held<B> {
    fn into_body(self) -> RequestBody<B> {
        match self {
            Self::Streaming(body) => RequestBody::streaming(body),
            Self::Buffered(data, trailers) => RequestBody::buffered(data, trailers),
        }
    }
}

/// The replayed response for a stored outcome. Its header map has room for
/// `Idempotent-Replayed` and the `Content-Length` the server adds, so that neither grows it.
pub(crate) fn replay<B: Body>(outcome: &Outcome) -> Result<Response<ResponseBody<B>>, DecodeError> {
    let stored = StoredResponse::decode_with_room(&outcome.body, 2)?;
    let mut response = Response::new(ResponseBody::buffered(stored.body, stored.trailers));
    *response.status_mut() = stored.status;
    *response.headers_mut() = stored.headers;
    response
        .headers_mut()
        .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    Ok(response)
}

/// The request, passed to the inner service unguarded.
fn pass_through<T, B, ResB>(
    mut inner: T,
    parts: Parts,
    held: Held<B>,
) -> impl Future<Output = Result<Response<ResponseBody<ResB>>, T::Error>>
where
    T: Service<Request<RequestBody<B>>, Response = Response<ResB>>,
    ResB: Body,
{
    // Boxed: the inner service's future would otherwise take its room in every guarded
    // request's future, which passes through only in rare cases.
    let response = Box::pin(inner.call(Request::from_parts(parts, held.into_body())));
    async move { Ok(response.await?.map(ResponseBody::inner)) }
}

type BoxedClaim<S> = Pin<Box<dyn Future<Output = Result<Decision<S>, StoreError>> + Send>>;

/// Claims the key for a request: one store call (or, in wait mode, a bounded poll).
///
/// A store that answers at once ([`Store::claim_ready`]) is answered here, with no future set
/// up; except for an in-flight key in wait mode, which is then awaited as below.
///
/// If the request is dropped meanwhile (the client went away), the claim still runs to its end
/// in the background, and a key it took is released at once (by dropping the execution) rather
/// than left in flight, refusing retries, until its lease ends.
fn claim<S: Store>(
    layer: &IdempotencyLayer<S>,
    storage_key: StorageKey,
    fingerprint: Fingerprint,
) -> ClaimGuard<S> {
    let settings = layer.settings();
    let ready = layer
        .shared
        .engine
        .begin_ready_in(&settings.namespace, storage_key, &fingerprint);
    match ready {
        Some(Ok(Decision::InFlight { .. })) if settings.in_flight != InFlightPolicy::Reject => {}
        Some(decision) => return ClaimGuard::ready(decision),
        None => {}
    }
    let shared = Arc::clone(&layer.shared);
    let claim: BoxedClaim<S> = match settings.in_flight {
        InFlightPolicy::Reject => Box::pin(async move {
            let namespace = &shared.settings.namespace;
            shared
                .engine
                .begin_in(namespace, storage_key, &fingerprint)
                .await
        }),
        InFlightPolicy::Wait { max } => Box::pin(async move {
            let namespace = &shared.settings.namespace;
            shared
                .engine
                .begin_waiting_in(namespace, storage_key, &fingerprint, max)
                .await
        }),
    };
    ClaimGuard {
        claim: Some(claim),
        ready: None,
    }
}

/// A claim that is finished in the background if dropped unfinished.
struct ClaimGuard<S: Store> {
    claim: Option<BoxedClaim<S>>,
    /// The answer of a store that answered at once.
    ready: Option<Result<Decision<S>, StoreError>>,
}

impl<S: Store> ClaimGuard<S> {
    fn ready(decision: Result<Decision<S>, StoreError>) -> Self {
        Self {
            claim: None,
            ready: Some(decision),
        }
    }
}

impl<S: Store> Future for ClaimGuard<S> {
    type Output = Result<Decision<S>, StoreError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(decision) = self.ready.take() {
            return Poll::Ready(decision);
        }
        let Some(claim) = self.claim.as_mut() else {
            panic!("ClaimGuard polled after completion");
        };
        let decision = ready!(claim.as_mut().poll(cx));
        self.claim = None;
        Poll::Ready(decision)
    }
}

impl<S: Store> Drop for ClaimGuard<S> {
    fn drop(&mut self) {
        if let Some(claim) = self.claim.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            tracing::debug!(
                "request dropped during its claim; finishing the claim in the background"
            );
            runtime.spawn(async move {
                // A key won here has no handler to run: give it back at once, so that the
                // client's retry runs rather than meeting a lease nobody renews.
                if let Ok(Decision::Execute(execution)) = claim.await {
                    let released = execution.release().await;
                    tracing::debug!(
                        ?released,
                        "the request left before its handler started; key released"
                    );
                }
            });
        }
    }
}

/// What a request's key and fingerprint say.
enum Identified {
    /// Guard it under this (hashed) key with this fingerprint.
    Guard(StorageKey, Fingerprint),
    /// No key, and none is required.
    PassThrough,
    /// Refuse it (a missing or invalid key, a body the fingerprint cannot read).
    Refuse(Refusal),
}

/// Reads a request's key (unless its header gave it, hashed) and fingerprint. Apart from [`run`] so
/// that the JSON it parses is never held across an await (it would enlarge every guarded
/// request's future).
fn identify<B>(
    settings: &Settings,
    parts: &Parts,
    held: &Held<B>,
    header_key: Option<StorageKey>,
) -> Identified {
    static EMPTY: Bytes = Bytes::new();
    let bytes = match held {
        Held::Buffered(data, _) => data,
        Held::Streaming(_) => &EMPTY,
    };
    let mut json = LazyJson::new(&settings.json, bytes);
    let key = match header_key {
        Some(key) => key,
        None => match settings.key.read(parts, bytes, &mut json) {
            Ok(Some(key)) => settings.scope_for(parts).storage_key(&key),
            Ok(None) if !settings.require_key => {
                tracing::trace!("no idempotency key; passing through");
                return Identified::PassThrough;
            }
            Ok(None) => {
                return Identified::Refuse(Refusal::new(
                    RefusalKind::MissingKey,
                    "this endpoint requires an idempotency key",
                ));
            }
            Err(error) => return Identified::Refuse(key_refusal(error)),
        },
    };
    match settings.fingerprint.compute(parts, bytes, &mut json) {
        Ok(fingerprint) => Identified::Guard(key, fingerprint),
        Err(detail) => Identified::Refuse(Refusal::new(RefusalKind::MalformedBody, detail)),
    }
}

/// Decides and answers one guarded request.
#[allow(clippy::manual_async_fn)] // an `async fn` would keep its arguments twice
pub(crate) fn run<T, S, B, ResB>(
    layer: IdempotencyLayer<S>,
    inner: T,
    parts: Parts,
    body: B,
    header_key: Option<StorageKey>,
) -> impl Future<Output = Result<Response<ResponseBody<ResB>>, T::Error>> + Send + 'static
where
    S: Store,
    T: Service<Request<RequestBody<B>>, Response = Response<ResB>> + Send + 'static,
    T::Future: Send + 'static,
    T::Error: Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    ResB: Body<Data = Bytes> + Send + Unpin + 'static,
    ResB::Error: Send + 'static,
{
    async move {
        let settings = layer.settings();
        let held = if settings.needs_body() {
            match collect_request(body, settings.max_body_bytes).await {
                Ok((data, trailers)) => Held::Buffered(data, trailers),
                Err(RequestCollectError::TooLarge) => {
                    return Ok(refuse(settings, too_large(settings)));
                }
                Err(RequestCollectError::Stream) => {
                    let refusal = Refusal::new(
                        RefusalKind::MalformedBody,
                        "the request body could not be read",
                    );
                    return Ok(refuse(settings, refusal));
                }
            }
        } else {
            Held::Streaming(body)
        };

        #[cfg(feature = "grpc")]
        if let Held::Buffered(data, _) = &held
            && settings.grpc
            && !crate::grpc::is_single_message(data)
        {
            tracing::debug!("not a single gRPC message (a streaming call?); passing through");
            return pass_through(inner, parts, held).await;
        }

        let (key, fingerprint) = match identify(settings, &parts, &held, header_key) {
            Identified::Guard(key, fingerprint) => (key, fingerprint),
            Identified::PassThrough => return pass_through(inner, parts, held).await,
            Identified::Refuse(refusal) => return Ok(refuse(settings, refusal)),
        };

        let decision = claim(&layer, key, fingerprint).await;
        let error = match decision {
            Ok(Decision::Execute(execution)) => {
                let request = Request::from_parts(parts, held.into_body());
                return execute::run(&layer, execution, inner, request).await;
            }
            Ok(Decision::Replay(outcome)) => match replay(&outcome) {
                Ok(response) => {
                    tracing::debug!(status = response.status().as_u16(), "replayed");
                    return Ok(response);
                }
                Err(error) => {
                    tracing::error!(%error, "stored response could not be decoded");
                    StoreError::Codec(error.to_string())
                }
            },
            Ok(Decision::InFlight { retry_after }) => {
                let refusal = Refusal::new(
                    RefusalKind::InFlight,
                    "a request with this idempotency key is still being processed",
                )
                .with_retry_after(retry_after);
                return Ok(refuse(settings, refusal));
            }
            Ok(Decision::Mismatch) => {
                let refusal = Refusal::new(
                    RefusalKind::Mismatch,
                    "this idempotency key was already used with a different request",
                );
                return Ok(refuse(settings, refusal));
            }
            Err(error) => error,
        };

        if settings.fail_open {
            tracing::warn!(%error, "idempotency store failed; failing open, the request runs unguarded");
            settings.counters.failed_open();
            return pass_through(inner, parts, held).await;
        }
        let refusal = Refusal::new(
            RefusalKind::StoreUnavailable,
            "the idempotency store is unavailable; retry later",
        )
        .with_retry_after(settings.unavailable_retry_after);
        Ok(refuse(settings, refusal))
    }
}
