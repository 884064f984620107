//! The service [`TokenLayer`] wraps a handler in: it consumes the request's token, then calls
//! the handler, or refuses. The layer's [`Layer`] impl is here, beside the service it makes,
//! so that `layer` stays a leaf that this file and `find` read.

use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use idempotency_core::Scope;
use idempotency_token::{TokenOutcome, TokenStore};
use tower_layer::Layer;
use tower_service::Service;

use super::find::{Found, field_names, find_token};
use super::future::TokenFuture;
use super::layer::TokenLayer;
use crate::body::{RequestBody, ResponseBody};
use crate::refusal::{Refusal, RefusalKind};

impl<S, T> Layer<S> for TokenLayer<T> {
    type Service = TokenService<S, T>;

    fn layer(&self, inner: S) -> Self::Service {
        TokenService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The middleware [`TokenLayer`] wraps a service in.
pub struct TokenService<S, T> {
    inner: S,
    layer: TokenLayer<T>,
}

impl<S: Clone, T> Clone for TokenService<S, T> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            layer: self.layer.clone(),
        }
    }
}

impl<S: std::fmt::Debug, T> std::fmt::Debug for TokenService<S, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenService")
            .field("inner", &self.inner)
            .field("layer", &self.layer)
            .finish()
    }
}

impl<S, T> TokenService<S, T> {
    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, T, ReqBody, ResBody> Service<Request<ReqBody>> for TokenService<S, T>
where
    S: Service<Request<RequestBody<ReqBody>>, Response = Response<ResBody>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    T: TokenStore,
    ReqBody: Body + Send + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = TokenFuture<ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The service that was polled ready runs the request; a fresh clone stays behind.
        let fresh = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, fresh);
        if !self.layer.methods.contains(request.method()) {
            let request = request.map(RequestBody::streaming);
            return Box::pin(
                async move { Ok(inner.call(request).await?.map(ResponseBody::inner)) },
            );
        }
        let layer = self.layer.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let (token, body) = match find_token(&layer, &parts, body).await {
                Found::Token(token, body) => (token, body),
                Found::Missing(_) => {
                    let detail = format!(
                        "no token in the {} header{}: token missing, unknown, expired or already used",
                        layer.header,
                        field_names(&layer)
                    );
                    return Ok(refuse(
                        &layer,
                        Refusal::new(RefusalKind::TokenRejected, detail),
                    ));
                }
                Found::Refused(refusal) => return Ok(refuse(&layer, refusal)),
            };
            let mut scope = Scope::new(&*layer.namespace);
            if let Some(principal) = layer.principal.as_ref().and_then(|f| f(&parts)) {
                scope = scope.with_principal(principal);
            }
            match layer.tokens.consume(&scope, &token).await {
                Ok(TokenOutcome::Consumed) => {
                    let request = Request::from_parts(parts, body);
                    Ok(inner.call(request).await?.map(ResponseBody::inner))
                }
                Ok(TokenOutcome::Invalid) => {
                    tracing::debug!(namespace = %layer.namespace, "one-time token rejected");
                    let detail = "token missing, unknown, expired or already used: this form \
                                  was already submitted or has expired; reload it to submit again";
                    Ok(refuse(
                        &layer,
                        Refusal::new(RefusalKind::TokenRejected, detail),
                    ))
                }
                Err(error) => {
                    tracing::warn!(namespace = %layer.namespace, %error, "token store failed");
                    let refusal = Refusal::new(
                        RefusalKind::StoreUnavailable,
                        "the token store is unavailable; retry later",
                    )
                    .with_retry_after(layer.unavailable_retry_after);
                    Ok(refuse(&layer, refusal))
                }
            }
        })
    }
}

fn refuse<T, B: Body>(layer: &TokenLayer<T>, refusal: Refusal) -> Response<ResponseBody<B>> {
    layer
        .renderer
        .render(&refusal)
        .map(|bytes| ResponseBody::buffered(bytes, None))
}
