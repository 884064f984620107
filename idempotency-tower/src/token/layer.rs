//! The token layer: where tokens are read from, which requests need one, how refusals read.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, Method};
use idempotency_token::TokenStore;

use crate::idempotency::config::PrincipalFn;
use crate::refusal::{ProblemJson, RenderRefusal};

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
    pub(super) tokens: Arc<T>,
    pub(super) namespace: Arc<str>,
    pub(super) header: HeaderName,
    pub(super) form_field: Option<Arc<str>>,
    pub(super) json_field: Option<Arc<str>>,
    pub(super) max_body_bytes: usize,
    pub(super) methods: Arc<[Method]>,
    pub(super) principal: Option<Arc<PrincipalFn>>,
    pub(super) renderer: Arc<dyn RenderRefusal>,
    pub(super) unavailable_retry_after: Duration,
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
