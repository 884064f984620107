//! The service both idempotency layers wrap a handler in: what is guarded is decided here (by
//! the request's head), what a guarded request runs is the layer's ([`Guard`]).

use std::task::{Context, Poll};

use http::{Request, Response};
use tower_service::Service;
use tracing::Instrument;

use super::future::ResponseFuture;
use super::guard::{Guard, Guarded, Handler, ReadBody, StoredBody};
use crate::answer::refuse;
use crate::body::{RequestBody, ResponseBody};
use crate::request::{Entry, enter, span};

/// The middleware an idempotency layer wraps a service in: [`IdempotencyService`] for
/// [`IdempotencyLayer`], `transactional::TransactionalService` for the transactional layer
/// (features `postgres`, `mysql`, `sqlite`).
///
/// The inner service receives `Request<RequestBody<B>>` (the original body streamed, or the
/// bytes the layer collected; with the request's transaction in its extensions behind the
/// transactional layer) and may answer with any body of `Bytes` that is `Unpin` (axum's,
/// hyper's and tonic's bodies are).
///
/// [`IdempotencyService`]: crate::IdempotencyService
/// [`IdempotencyLayer`]: crate::IdempotencyLayer
pub struct GuardedService<T, L> {
    inner: T,
    layer: L,
}

impl<T: Clone, L: Clone> Clone for GuardedService<T, L> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            layer: self.layer.clone(),
        }
    }
}

impl<T: std::fmt::Debug, L: std::fmt::Debug> std::fmt::Debug for GuardedService<T, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedService")
            .field("inner", &self.inner)
            .field("layer", &self.layer)
            .finish()
    }
}

impl<T, L> GuardedService<T, L> {
    /// Wraps `inner`.
    pub fn new(inner: T, layer: L) -> Self {
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

// `Guard` is the crate's own: implemented by the two layers only.
#[allow(private_bounds)]
impl<T, L, B, ResB> Service<Request<B>> for GuardedService<T, L>
where
    L: Guard,
    // The response type names `ResB` (a trait's parameter alone would not).
    T: Service<Request<RequestBody<B>>, Response = Response<ResB>> + Handler<B, ResB> + Clone,
    B: ReadBody,
    ResB: StoredBody,
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
                let span = span(settings, &parts);
                // The clone that was made ready serves this request (tower's contract).
                let ready = self.inner.clone();
                let inner = std::mem::replace(&mut self.inner, ready);
                let request = Guarded(inner, parts, body, header_key);
                let future = self.layer.run::<(T, B, ResB)>(request);
                ResponseFuture::gated(future.instrument(span))
            }
        }
    }
}
