//! What a layer reads from a guarded request before it claims: the body (once, within the
//! limit), the verification (a callback's signature), the key and the fingerprint.

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, Request, Response};
use http_body::Body;
use idempotency_core::{Fingerprint, IdempotencyKey, KeyError, Mechanism, StorageKey};
use tower_service::Service;

use crate::body::{RequestBody, ResponseBody};
use crate::collect::RequestCollectError;
use crate::idempotency::config::Settings;
use crate::json::LazyJson;
use crate::refusal::{Refusal, RefusalKind};

/// The request body: still streaming, or collected once for the key, the fingerprint, the
/// verification and the handler.
pub(crate) enum Payload<B> {
    Streaming(B),
    Buffered(Bytes, Option<HeaderMap>),
}

impl<B> Payload<B> {
    /// The body the handler reads.
    pub(crate) fn into_body(self) -> RequestBody<B> {
        match self {
            Self::Streaming(body) => RequestBody::streaming(body),
            Self::Buffered(data, trailers) => RequestBody::buffered(data, trailers),
        }
    }
}

/// The request, passed to the inner service unguarded.
pub(crate) fn pass_through<T, B, ResB>(
    mut inner: T,
    parts: Parts,
    held: Payload<B>,
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

/// What a guarded request says.
pub(crate) enum Read {
    /// Claim this (hashed) key with this fingerprint.
    Guard(StorageKey, Fingerprint),
    /// No key where none is required, or a call the layer does not guard (a streaming gRPC
    /// call): hand it to the inner service as it is.
    PassThrough,
    /// Answer with this refusal (nothing is claimed, the handler does not run).
    Refuse(Refusal),
}

/// The refusal of a key that cannot be used.
pub(crate) fn key_refusal(error: KeyError) -> Refusal {
    let kind = match error {
        KeyError::Missing => RefusalKind::MissingKey,
        KeyError::Body(_) => RefusalKind::MalformedBody,
        _ => RefusalKind::InvalidKey,
    };
    Refusal::new(kind, error.to_string())
}

/// The refusal of a body over the limit.
pub(crate) fn too_large(settings: &Settings) -> Refusal {
    Refusal::new(
        RefusalKind::BodyTooLarge,
        format!(
            "the request body is larger than {} bytes",
            settings.max_body_bytes
        ),
    )
}

/// The held body of a request whose body was collected (`collect_request`): refused over the
/// limit (413) or when it cannot be read (400). A plain function, so that the caller's future
/// awaits `collect_request` itself (a wrapping future would enlarge every guarded request's).
pub(crate) fn collected<B>(
    settings: &Settings,
    collected: Result<(Bytes, Option<HeaderMap>), RequestCollectError>,
) -> Result<Payload<B>, Refusal> {
    match collected {
        Ok((data, trailers)) => Ok(Payload::Buffered(data, trailers)),
        Err(RequestCollectError::TooLarge) => Err(too_large(settings)),
        Err(RequestCollectError::Stream) => Err(Refusal::new(
            RefusalKind::MalformedBody,
            "the request body could not be read",
        )),
        Err(RequestCollectError::TimedOut) => Err(Refusal::new(
            RefusalKind::BodyTimeout,
            format!(
                "the request body did not arrive within {} ms",
                settings.body_read_timeout.as_millis()
            ),
        )),
    }
}

/// Reads a guarded request whose body is [`collected`]: verifies it, then finds its key
/// (unless its header gave it, hashed: `header_key`) and fingerprint. Not `async`, so that
/// the JSON it parses is never held across an await.
pub(crate) fn inspect<B>(
    settings: &Settings,
    parts: &Parts,
    held: &Payload<B>,
    header_key: Option<StorageKey>,
) -> Read {
    static EMPTY: Bytes = Bytes::new();
    let bytes = match held {
        Payload::Buffered(data, _) => data,
        Payload::Streaming(_) => &EMPTY,
    };

    #[cfg(feature = "grpc")]
    if settings.grpc
        && matches!(held, Payload::Buffered(..))
        && !crate::grpc::is_single_message(bytes)
    {
        tracing::debug!("not a single gRPC message (a streaming call?); passing through");
        return Read::PassThrough;
    }

    if let (Some(verify), Payload::Buffered(data, _)) = (&settings.verify, held)
        && let Err(detail) = verify(parts, data)
    {
        return Read::Refuse(Refusal::new(RefusalKind::Unverified, detail));
    }

    let mut json = LazyJson::new(&settings.json, bytes);
    let key = match header_key {
        Some(key) => key,
        None => match settings.key.read(parts, bytes, &mut json) {
            Ok(Some(key)) => {
                let scope = match settings.scope_for(parts) {
                    Ok(scope) => scope,
                    Err(refusal) => return Read::Refuse(refusal),
                };
                match &settings.key_status {
                    None => scope.storage_key(&key),
                    Some(status) => {
                        match crate::callback::key_with_status(key.as_str(), status, &mut json) {
                            Ok(text) => scope.storage_key_for(Mechanism::Request, &text),
                            Err(error) => return Read::Refuse(key_refusal(error)),
                        }
                    }
                }
            }
            Ok(None) if !settings.require_key => {
                tracing::trace!("no idempotency key; passing through");
                return Read::PassThrough;
            }
            Ok(None) => {
                return Read::Refuse(Refusal::new(
                    RefusalKind::MissingKey,
                    "this endpoint requires an idempotency key",
                ));
            }
            Err(error) => return Read::Refuse(key_refusal(error)),
        },
    };
    match settings.fingerprint.compute(parts, bytes, &mut json) {
        Ok(fingerprint) => Read::Guard(key, fingerprint),
        Err(detail) => Read::Refuse(Refusal::new(RefusalKind::MalformedBody, detail)),
    }
}

/// The fingerprint the layer computed before a change
/// ([`previous_fingerprint`](crate::IdempotencyLayerBuilder::previous_fingerprint)), if one is
/// configured and the request can be read for it.
pub(crate) fn previous_fingerprint<B>(
    settings: &Settings,
    parts: &Parts,
    held: &Payload<B>,
) -> Option<Fingerprint> {
    static EMPTY: Bytes = Bytes::new();
    let previous = settings.previous_fingerprint.as_ref()?;
    let bytes = match held {
        Payload::Buffered(data, _) => data,
        Payload::Streaming(_) => &EMPTY,
    };
    let mut json = LazyJson::new(&settings.json, bytes);
    previous.compute(parts, bytes, &mut json).ok()
}

/// What a layer does with a request before reading its body.
pub(crate) enum Entry<B> {
    /// Not guarded (method, path, content type), or no key where none is required: hand it to
    /// the inner service untouched.
    Pass(Request<RequestBody<B>>),
    /// Refuse it at once (a missing or malformed key header).
    Refuse(Refusal),
    /// Read it and claim; a key found in its header is given here, validated and hashed
    /// straight from the header (no copy of a bare key is made).
    Guard(Parts, B, Option<StorageKey>),
}

/// Looks at a request's head: is it guarded, and what does its key header say.
pub(crate) fn enter<B>(settings: &Settings, request: Request<B>) -> Entry<B> {
    if !settings.applies(request.method(), request.uri().path(), request.headers()) {
        return Entry::Pass(request.map(RequestBody::streaming));
    }
    let (parts, body) = request.into_parts();
    // The completer's resume of a run carries its storage key, not a client's header.
    #[cfg(feature = "steps")]
    if parts.extensions.get::<crate::steps::Resume>().is_some() {
        return Entry::Guard(parts, body, None);
    }
    let crate::key_source::KeySource::Header(name) = &settings.key else {
        return Entry::Guard(parts, body, None);
    };
    let refusal = match crate::key_source::key_header(&parts.headers, name) {
        Ok(Some(value)) => match IdempotencyKey::header_text(value.as_bytes()) {
            Ok(text) => match settings.scope_for(&parts) {
                Ok(scope) => {
                    let key = scope.storage_key_for(Mechanism::Request, &text);
                    return Entry::Guard(parts, body, Some(key));
                }
                Err(refusal) => refusal,
            },
            Err(error) => key_refusal(error),
        },
        Ok(None) if !settings.require_key => {
            tracing::trace!(
                path = parts.uri.path(),
                "no idempotency key; passing through"
            );
            return Entry::Pass(Request::from_parts(parts, RequestBody::streaming(body)));
        }
        Ok(None) => Refusal::new(
            RefusalKind::MissingKey,
            format!("an idempotency key is required ({name})"),
        ),
        Err(error) => key_refusal(error),
    };
    Entry::Refuse(refusal)
}

/// The span a guarded request runs in ([`idempotency_core::telemetry`]: `idempotency.guard`).
pub(crate) fn span(settings: &Settings, parts: &Parts) -> tracing::Span {
    idempotency_core::telemetry::http_span(
        settings.scope.namespace(),
        parts.method.as_str(),
        parts.uri.path(),
    )
}
