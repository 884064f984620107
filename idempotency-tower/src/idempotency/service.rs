//! The service.

use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use idempotency_core::{KeyError, Store};
use tower_service::Service;
use tracing::Instrument;

use super::future::{GatedFuture, ResponseFuture};
use super::gate;
use super::layer::IdempotencyLayer;
use crate::body::{RequestBody, ResponseBody};
use crate::key_source::{KeySource, key_header};
use crate::refusal::{Refusal, RefusalKind};

/// The middleware [`IdempotencyLayer`] wraps a service in.
///
/// The inner service receives `Request<RequestBody<B>>` (the original body streamed, or the
/// bytes the layer collected) and may answer with any body of `Bytes` that is `Unpin` (axum's,
/// hyper's and tonic's bodies are).
pub struct IdempotencyService<T, S> {
    inner: T,
    layer: IdempotencyLayer<S>,
}

impl<T: Clone, S> Clone for IdempotencyService<T, S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            layer: self.layer.clone(),
        }
    }
}

impl<T: std::fmt::Debug, S> std::fmt::Debug for IdempotencyService<T, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyService")
            .field("inner", &self.inner)
            .field("layer", &self.layer)
            .finish()
    }
}

impl<T, S> IdempotencyService<T, S> {
    /// Wraps `inner`.
    pub fn new(inner: T, layer: IdempotencyLayer<S>) -> Self {
        Self { inner, layer }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> T {
        self.inner
    }
}

pub(crate) fn key_refusal(error: KeyError) -> Refusal {
    let kind = match error {
        KeyError::Missing => RefusalKind::MissingKey,
        KeyError::Body(_) => RefusalKind::MalformedBody,
        _ => RefusalKind::InvalidKey,
    };
    Refusal::new(kind, error.to_string())
}

impl<T, S, B, ResB> Service<Request<B>> for IdempotencyService<T, S>
where
    S: Store,
    T: Service<Request<RequestBody<B>>, Response = Response<ResB>> + Clone + Send + 'static,
    T::Future: Send + 'static,
    T::Error: Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    ResB: Body<Data = Bytes> + Send + Unpin + 'static,
    ResB::Error: Send + 'static,
{
    type Response = Response<ResponseBody<ResB>>;
    type Error = T::Error;
    type Future = ResponseFuture<T::Future, ResB, T::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let settings = self.layer.settings();
        if !settings.applies(request.method(), request.uri().path(), request.headers()) {
            return ResponseFuture::passthrough(
                self.inner.call(request.map(RequestBody::streaming)),
            );
        }
        let (parts, body) = request.into_parts();
        // A header key is hashed here, straight from the header (no copy of the key is made).
        let header_key = match &settings.key {
            KeySource::Header(name) => match key_header(&parts.headers, name) {
                Ok(Some(value)) => {
                    match settings
                        .scope_for(&parts)
                        .storage_key_of_header(value.as_bytes())
                    {
                        Ok(key) => Some(key),
                        Err(error) => {
                            return ResponseFuture::ready(gate::refuse(
                                settings,
                                key_refusal(error),
                            ));
                        }
                    }
                }
                Ok(None) if !settings.require_key => {
                    tracing::trace!(
                        path = parts.uri.path(),
                        "no idempotency key; passing through"
                    );
                    let request = Request::from_parts(parts, RequestBody::streaming(body));
                    return ResponseFuture::passthrough(self.inner.call(request));
                }
                Ok(None) => {
                    let refusal = Refusal::new(
                        RefusalKind::MissingKey,
                        format!("an idempotency key is required ({name})"),
                    );
                    return ResponseFuture::ready(gate::refuse(settings, refusal));
                }
                Err(error) => {
                    return ResponseFuture::ready(gate::refuse(settings, key_refusal(error)));
                }
            },
            _ => None,
        };
        // A body declared larger than the limit (hyper declares a request's `Content-Length`) is
        // refused by `collect_request` before any of it is read.
        let span = tracing::debug_span!(
            "idempotency",
            namespace = settings.scope.namespace(),
            method = %parts.method,
            path = parts.uri.path(),
        );
        let ready = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, ready);
        let future = gate::run(self.layer.clone(), inner, parts, body, header_key);
        let future: GatedFuture<ResB, T::Error> = Box::pin(future);
        ResponseFuture::gated(future.instrument(span))
    }
}
