//! One-time tokens against front-end double submits, as a tower layer.
//!
//! A page asks a [`TokenStore`] for a token when it renders a form
//! ([`TokenStore::issue`]) and the form sends it back in the `Idempotency-Token` header, or in a
//! hidden form field ([`TokenLayer::form_field`]) or a JSON body field
//! ([`TokenLayer::json_field`]) for plain HTML forms and scripts that cannot set headers. The
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

use crate::body::{RequestBody, ResponseBody};
use crate::collect::{RequestCollectError, collect_request};
use crate::idempotency::PrincipalFn;
use crate::refusal::{ProblemJson, Refusal, RefusalKind, RenderRefusal};

/// The default token header, `Idempotency-Token`.
pub const IDEMPOTENCY_TOKEN: HeaderName = HeaderName::from_static("idempotency-token");

/// How much of a body the layer reads to find a form or JSON token field (default 64 KiB).
pub const DEFAULT_TOKEN_BODY_BYTES: usize = 64 * 1024;

/// Consumes a one-time token before the handler runs (see the [crate docs](crate)).
///
/// Guards POST, PUT, PATCH and DELETE by default ([`methods`](Self::methods)); other methods
/// pass through untouched. The token's scope is `Scope::new(namespace)`, with the principal of
/// [`principal`](Self::principal) when set: issue tokens in the same scope.
pub struct TokenLayer<T> {
    tokens: Arc<T>,
    namespace: Arc<str>,
    header: HeaderName,
    form_field: Option<Arc<str>>,
    json_field: Option<Arc<str>>,
    max_body_bytes: usize,
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
            form_field: self.form_field.clone(),
            json_field: self.json_field.clone(),
            max_body_bytes: self.max_body_bytes,
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
            .field("form_field", &self.form_field)
            .field("json_field", &self.json_field)
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
            form_field: None,
            json_field: None,
            max_body_bytes: DEFAULT_TOKEN_BODY_BYTES,
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

    /// Also accepts the token from this field of an `application/x-www-form-urlencoded` body
    /// (a hidden `<input>`), when the header is absent. The body is read (up to
    /// [`max_body_bytes`](Self::max_body_bytes)) and handed on unchanged.
    pub fn form_field(mut self, name: impl Into<String>) -> Self {
        self.form_field = Some(Arc::from(name.into()));
        self
    }

    /// Also accepts the token from this field of a JSON body, a JSON Pointer such as
    /// `/idempotency_token`, when the header is absent. The body is read (up to
    /// [`max_body_bytes`](Self::max_body_bytes)) and handed on unchanged.
    pub fn json_field(mut self, pointer: impl Into<String>) -> Self {
        self.json_field = Some(Arc::from(pointer.into()));
        self
    }

    /// The most the layer reads of a body to find a token field (default 64 KiB); a larger
    /// body is refused with 413.
    pub fn max_body_bytes(mut self, limit: usize) -> Self {
        self.max_body_bytes = limit;
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

/// Where the token was found, or why not.
enum Found<B> {
    Token(String, RequestBody<B>),
    Missing(RequestBody<B>),
    Refused(Refusal),
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

/// " or the `x` form field or the `/y` JSON field", for the refusal's detail.
fn field_names<T>(layer: &TokenLayer<T>) -> String {
    let mut names = String::new();
    if let Some(field) = &layer.form_field {
        names.push_str(&format!(" or the `{field}` form field"));
    }
    if let Some(pointer) = &layer.json_field {
        names.push_str(&format!(" or the `{pointer}` JSON field"));
    }
    names
}

/// The header first; then, if configured and the content type matches, a body field (the body
/// is collected once and handed on as bytes).
async fn find_token<T, B: Body>(
    layer: &TokenLayer<T>,
    parts: &http::request::Parts,
    body: B,
) -> Found<B> {
    let header = parts
        .headers
        .get(&layer.header)
        .and_then(|value| value.to_str().ok())
        .map(str::trim)
        .filter(|value| !value.is_empty());
    if let Some(token) = header {
        return Found::Token(token.to_owned(), RequestBody::streaming(body));
    }
    let content_type = parts
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let form = layer
        .form_field
        .as_deref()
        .filter(|_| content_type.starts_with("application/x-www-form-urlencoded"));
    let json = layer.json_field.as_deref().filter(|_| {
        let essence = content_type.split(';').next().unwrap_or_default().trim();
        essence == "application/json" || essence.ends_with("+json")
    });
    if form.is_none() && json.is_none() {
        return Found::Missing(RequestBody::streaming(body));
    }
    let read = collect_request(body, layer.max_body_bytes, crate::DEFAULT_BODY_READ_TIMEOUT);
    let (data, trailers) = match read.await {
        Ok(collected) => collected,
        Err(RequestCollectError::TooLarge) => {
            let detail = format!(
                "the body is larger than the {} bytes read to find the token",
                layer.max_body_bytes
            );
            return Found::Refused(Refusal::new(RefusalKind::BodyTooLarge, detail));
        }
        Err(RequestCollectError::Stream) => {
            let detail = "the request body could not be read";
            return Found::Refused(Refusal::new(RefusalKind::MalformedBody, detail));
        }
        Err(RequestCollectError::TimedOut) => {
            let detail = "the request body did not arrive in time";
            return Found::Refused(Refusal::new(RefusalKind::BodyTimeout, detail));
        }
    };
    let token = match (form, json) {
        (Some(field), _) => form_value(&data, field),
        (None, Some(pointer)) => serde_json::from_slice::<serde_json::Value>(&data)
            .ok()
            .and_then(|value| {
                value
                    .pointer(pointer)
                    .and_then(|v| v.as_str().map(str::to_owned))
            }),
        (None, None) => None,
    };
    let body = RequestBody::buffered(data, trailers);
    match token.filter(|token| !token.is_empty()) {
        Some(token) => Found::Token(token, body),
        None => Found::Missing(body),
    }
}

/// The first value of `field` in an `application/x-www-form-urlencoded` body.
fn form_value(body: &[u8], field: &str) -> Option<String> {
    body.split(|&byte| byte == b'&').find_map(|pair| {
        let mut halves = pair.splitn(2, |&byte| byte == b'=');
        let name = percent_decode(halves.next()?)?;
        (name == field).then(|| percent_decode(halves.next().unwrap_or_default()))?
    })
}

/// Decodes `+` and `%XX` escapes; `None` for malformed escapes or non-UTF-8 text.
fn percent_decode(text: &[u8]) -> Option<String> {
    let mut out = Vec::with_capacity(text.len());
    let mut bytes = text.iter();
    while let Some(&byte) = bytes.next() {
        match byte {
            b'+' => out.push(b' '),
            b'%' => {
                let high = (*bytes.next()? as char).to_digit(16)?;
                let low = (*bytes.next()? as char).to_digit(16)?;
                out.push(u8::try_from(high * 16 + low).ok()?);
            }
            other => out.push(other),
        }
    }
    String::from_utf8(out).ok()
}

fn refuse<T, B: Body>(layer: &TokenLayer<T>, refusal: Refusal) -> Response<ResponseBody<B>> {
    layer
        .renderer
        .render(&refusal)
        .map(|bytes| ResponseBody::buffered(bytes, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_form_fields() {
        let body = b"item=42&note=a+b%21&_token=abc-DEF_1";
        assert_eq!(form_value(body, "_token").as_deref(), Some("abc-DEF_1"));
        assert_eq!(form_value(body, "note").as_deref(), Some("a b!"));
        assert_eq!(form_value(body, "missing"), None);
        assert_eq!(form_value(b"_token=%zz", "_token"), None);
        assert_eq!(form_value(b"_token", "_token").as_deref(), Some(""));
    }
}
