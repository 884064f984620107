//! What a layer brings to a [`GuardedService`](super::GuardedService): the [`Guard`] it
//! implements, and the bounds on the handler and the bodies it runs.

use bytes::Bytes;
use http::request::Parts;
use http::{Request, Response};
use http_body::Body;
use idempotency_core::StorageKey;
use tower_service::Service;

use super::future::GatedFuture;
use crate::body::RequestBody;
use crate::idempotency::config::Settings;

/// A layer's part in a [`GuardedService`](super::GuardedService): its settings, and what a
/// request it guards runs.
pub(crate) trait Guard: Clone {
    /// What is guarded, and how refusals read.
    fn settings(&self) -> &Settings;

    /// The decision for one guarded request and its answer.
    fn run<T, B, ResB>(
        &self,
        inner: T,
        parts: Parts,
        body: B,
        header_key: Option<StorageKey>,
    ) -> GatedFuture<ResB, T::Error>
    where
        T: Handler<B, ResB>,
        B: ReadBody,
        ResB: StoredBody;
}

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
