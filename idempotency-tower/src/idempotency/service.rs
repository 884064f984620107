//! The service.

use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use idempotency_core::Store;
use tower_service::Service;
use tracing::Instrument;

use super::gate;
use super::layer::IdempotencyLayer;
use crate::answer::refuse;
use crate::body::{RequestBody, ResponseBody};
use crate::future::{GatedFuture, ResponseFuture};
use crate::request::{Entry, enter, span};

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
        match enter(settings, request) {
            Entry::Pass(request) => ResponseFuture::passthrough(self.inner.call(request)),
            Entry::Refuse(refusal) => ResponseFuture::ready(refuse(settings, refusal)),
            Entry::Guard(parts, body, header_key) => {
                // A body declared larger than the limit (hyper declares a request's
                // `Content-Length`) is refused before any of it is read.
                let span = span(settings, &parts);
                let ready = self.inner.clone();
                let inner = std::mem::replace(&mut self.inner, ready);
                let future = gate::run(self.layer.clone(), inner, parts, body, header_key);
                let future: GatedFuture<ResB, T::Error> = Box::pin(future);
                ResponseFuture::gated(future.instrument(span))
            }
        }
    }
}
