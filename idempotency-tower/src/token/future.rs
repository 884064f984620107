//! The token service's response future.

use std::future::Future;
use std::pin::Pin;

use http::Response;

use crate::body::ResponseBody;

/// The future of [`TokenService`](super::TokenService): the token check, then the inner service's response.
pub type TokenFuture<B, E> =
    Pin<Box<dyn Future<Output = Result<Response<ResponseBody<B>>, E>> + Send + 'static>>;
