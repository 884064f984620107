//! One-time tokens against front-end double submits, as a tower layer.
//!
//! A page asks a [`TokenStore`] for a token when it renders a form
//! ([`TokenStore::issue`]) and the form sends it back in the `Idempotency-Token` header. The
//! [`TokenLayer`] consumes the token before the handler runs: exactly one submit per token gets
//! through, every other one (missing, unknown, expired or already used token) is refused with
//! **409** `application/problem+json` ([`RefusalKind::TokenRejected`]) and never reaches the
//! handler. A failing token store answers **503** + `Retry-After`.
//!
//! **Tokens do not protect callbacks, queues or RPC retries.** A payment provider's callback, a
//! redelivered message or a retried RPC carries no token issued by your page; guard those with
//! idempotency keys ([`crate::IdempotencyLayer`]). Tokens only stop a user from submitting the
//! same form twice (double clicks, the back button, a resubmitted page).
//!
//! ```
//! use axum::{Router, routing::post};
//! use idempotency_core::{DEFAULT_TOKEN_TTL, MemoryTokenStore, Scope, TokenStore};
//! use idempotency_tower::{IDEMPOTENCY_TOKEN, TokenLayer};
//! use std::sync::Arc;
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let tokens = Arc::new(MemoryTokenStore::new());
//! let app = Router::new()
//!     .route("/checkout", post(|| async { "ordered" }))
//!     .layer(TokenLayer::new(Arc::clone(&tokens), "checkout"));
//!
//! // The page that renders the form issues the token in the same scope.
//! let token = tokens.issue(&Scope::new("checkout"), DEFAULT_TOKEN_TTL).await.unwrap();
//! let submit = || {
//!     http::Request::post("/checkout")
//!         .header(IDEMPOTENCY_TOKEN, token.value.as_str())
//!         .body(axum::body::Body::empty())
//!         .unwrap()
//! };
//! assert_eq!(app.clone().oneshot(submit()).await.unwrap().status(), 200);
//! assert_eq!(app.oneshot(submit()).await.unwrap().status(), 409);
//! # }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, Method, Request, Response};
use http_body::Body;
use idempotency_core::{Scope, TokenOutcome, TokenStore};
use tower_layer::Layer;
use tower_service::Service;

use crate::body::ResponseBody;
use crate::idempotency::PrincipalFn;
use crate::refusal::{ProblemJson, Refusal, RefusalKind, RenderRefusal};

/// The default token header, `Idempotency-Token`.
pub const IDEMPOTENCY_TOKEN: HeaderName = HeaderName::from_static("idempotency-token");

/// Consumes a one-time token before the handler runs (see the [module docs](self)).
///
/// Guards POST, PUT, PATCH and DELETE by default ([`methods`](Self::methods)); other methods
/// pass through untouched. The token's scope is `Scope::new(namespace)`, with the principal of
/// [`principal`](Self::principal) when set: issue tokens in the same scope.
pub struct TokenLayer<T> {
    tokens: Arc<T>,
    namespace: Arc<str>,
    header: HeaderName,
    methods: Arc<[Method]>,
    principal: Option<Arc<PrincipalFn>>,
    renderer: Arc<dyn RenderRefusal>,
    unavailable_retry_after: Duration,
}

impl<T> Clone for TokenLayer<T> {
    fn clone(&self) -> Self {
        Self {
            tokens: Arc::clone(&self.tokens),
            namespace: Arc::clone(&self.namespace),
            header: self.header.clone(),
            methods: Arc::clone(&self.methods),
            principal: self.principal.clone(),
            renderer: Arc::clone(&self.renderer),
            unavailable_retry_after: self.unavailable_retry_after,
        }
    }
}

impl<T> std::fmt::Debug for TokenLayer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenLayer")
            .field("namespace", &self.namespace)
            .field("header", &self.header)
            .field("methods", &self.methods)
            .finish_non_exhaustive()
    }
}

impl<T: TokenStore> TokenLayer<T> {
    /// Tokens of `tokens` in the scope `namespace` (for example the form's name). Pass an
    /// `Arc` of the store to share it with the pages that issue tokens.
    pub fn new(tokens: T, namespace: impl Into<String>) -> Self {
        Self {
            tokens: Arc::new(tokens),
            namespace: Arc::from(namespace.into()),
            header: IDEMPOTENCY_TOKEN,
            methods: Arc::from([Method::POST, Method::PUT, Method::PATCH, Method::DELETE]),
            principal: None,
            renderer: Arc::new(ProblemJson::new()),
            unavailable_retry_after: Duration::from_secs(1),
        }
    }

    /// Reads the token from another header (default `Idempotency-Token`).
    pub fn header(mut self, name: HeaderName) -> Self {
        self.header = name;
        self
    }

    /// The methods that need a token (default POST, PUT, PATCH, DELETE).
    pub fn methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.methods = methods.into_iter().collect();
        self
    }

    /// Scopes tokens by principal (the user the form was rendered for), named by a function of
    /// the request head: a token issued to one user is refused for another.
    pub fn principal(
        mut self,
        principal: impl Fn(&http::request::Parts) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.principal = Some(Arc::new(principal));
        self
    }

    /// Renders refusals (default [`ProblemJson`]).
    pub fn render(mut self, renderer: impl RenderRefusal) -> Self {
        self.renderer = Arc::new(renderer);
        self
    }

    /// The `Retry-After` sent with 503 when the token store fails (default 1 s).
    pub fn unavailable_retry_after(mut self, after: Duration) -> Self {
        self.unavailable_retry_after = after;
        self
    }
}

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

/// The future of [`TokenService`]: the token check, then the inner service's response.
pub type TokenFuture<B, E> =
    Pin<Box<dyn Future<Output = Result<Response<ResponseBody<B>>, E>> + Send + 'static>>;

impl<S, T, ReqBody, ResBody> Service<Request<ReqBody>> for TokenService<S, T>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    T: TokenStore,
    ReqBody: Send + 'static,
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
            return Box::pin(
                async move { Ok(inner.call(request).await?.map(ResponseBody::inner)) },
            );
        }
        let layer = self.layer.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let token = parts
                .headers
                .get(&layer.header)
                .and_then(|value| value.to_str().ok())
                .map(str::trim)
                .filter(|value| !value.is_empty())
                .map(str::to_owned);
            let Some(token) = token else {
                let detail = format!(
                    "the {} header is missing: token missing, unknown, expired or already used",
                    layer.header
                );
                return Ok(refuse(
                    &layer,
                    Refusal::new(RefusalKind::TokenRejected, detail),
                ));
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
