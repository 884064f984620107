//! What a layer brings to a [`GuardedService`](super::GuardedService): the [`Guard`] it
//! implements, and the bounds on the handler and the bodies it runs.

use bytes::Bytes;
use http::request::Parts;
use http::{Request, Response};
use http_body::Body;
use idempotency_core::StorageKey;
use tower_service::Service;

use super::future::GatedFuture;
use crate::body::{RequestBody, ResponseBody};
use crate::idempotency::config::Settings;

/// A layer's part in a [`GuardedService`](super::GuardedService): its settings, and what a
/// request it guards runs.
pub(crate) trait Guard: Clone {
    /// What is guarded, and how refusals read.
    fn settings(&self) -> &Settings;

    /// The decision for one guarded request and its answer.
    fn run<X: Exchange>(&self, request: Guarded<X>) -> GatedFuture<X::Answer, X::Error>;
}

/// The types of one guarded exchange under one name, so that what runs a guarded request
/// states their bounds once: the inner service, the request body the layer reads and the
/// response body it stores. Implemented by the tuple `(inner, request body, response body)`.
pub(crate) trait Exchange: 'static {
    /// The service that answers the request.
    type Inner: Handler<Self::Body, Self::Answer, Error = Self::Error>;
    /// The request body the layer reads.
    type Body: ReadBody;
    /// The response body the layer stores.
    type Answer: StoredBody;
    /// The inner service's error, passed on as it is.
    type Error: Send + 'static;
}

impl<T, B, ResB> Exchange for (T, B, ResB)
where
    T: Handler<B, ResB>,
    B: ReadBody,
    ResB: StoredBody,
{
    type Inner = T;
    type Body = B;
    type Answer = ResB;
    type Error = T::Error;
}

/// What a guarded request's answer is: the response the layer gives, or the inner service's
/// error.
pub(crate) type Answered<X> =
    Result<Response<ResponseBody<<X as Exchange>::Answer>>, <X as Exchange>::Error>;

/// One guarded request, as the service hands it to its layer: the service that answers it,
/// its head, its body (not read yet), and the key its header carried if the header was read
/// on entry.
pub(crate) struct Guarded<X: Exchange>(
    pub(crate) X::Inner,
    pub(crate) Parts,
    pub(crate) X::Body,
    pub(crate) Option<StorageKey>,
);

/// The service a layer guards: it takes the request with the body the layer read, and its
/// future and errors may move to another task (a handler whose client left runs on).
pub(crate) trait Handler<B, ResB>:
    Service<
        Request<RequestBody<B>>,
        Response = Response<ResB>,
        Future: Send + 'static,
        Error: Send + 'static,
    > + Send
    + 'static
{
}

impl<T, B, ResB> Handler<B, ResB> for T
where
    T: Service<Request<RequestBody<B>>, Response = Response<ResB>> + Send + 'static,
    T::Future: Send + 'static,
    T::Error: Send + 'static,
{
}

/// A request body a layer reads (for the key, the fingerprint, the verification).
pub(crate) trait ReadBody: Body<Data: Send> + Send + 'static {}

impl<B> ReadBody for B where B: Body<Data: Send> + Send + 'static {}

/// A response body a layer stores for replay.
pub(crate) trait StoredBody:
    Body<Data = Bytes, Error: Send + 'static> + Send + Unpin + 'static
{
}

impl<B> StoredBody for B where B: Body<Data = Bytes, Error: Send + 'static> + Send + Unpin + 'static {}
