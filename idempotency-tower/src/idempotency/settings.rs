//! The layer's settings, shared by every clone of its service.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;
use http::{HeaderMap, Method};
use idempotency_core::Scope;

use crate::fingerprint::FingerprintSource;
use crate::headers::IDEMPOTENCY_KEY;
use crate::key_source::KeySource;
use crate::policy::{InFlightPolicy, StoragePolicy};
use crate::refusal::{ProblemJson, RenderRefusal};

/// A user function naming the principal (tenant, user, API client) a request acts for.
pub type PrincipalFn = dyn Fn(&Parts) -> Option<String> + Send + Sync + 'static;

/// Default limit of the request body the layer reads: 1 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;
/// Default limit of a response the layer stores: 1 MiB.
pub const DEFAULT_MAX_STORED_BYTES: usize = 1024 * 1024;
/// Default limit of the header (and trailer) fields of a response the layer stores: 100.
pub const DEFAULT_MAX_STORED_HEADERS: usize = 100;
/// Default limit of the bytes of those fields' names and values: 64 KiB.
pub const DEFAULT_MAX_STORED_HEADER_BYTES: usize = 64 * 1024;

#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) scope: Scope,
    pub(crate) key: KeySource,
    pub(crate) methods: Vec<Method>,
    pub(crate) paths: Option<Arc<[String]>>,
    pub(crate) require_key: bool,
    pub(crate) principal: Option<Arc<PrincipalFn>>,
    pub(crate) fingerprint: FingerprintSource,
    pub(crate) max_body_bytes: usize,
    pub(crate) max_stored_bytes: usize,
    pub(crate) max_stored_headers: usize,
    pub(crate) max_stored_header_bytes: usize,
    pub(crate) keep_alive: bool,
    pub(crate) in_flight: InFlightPolicy,
    pub(crate) storage: StoragePolicy,
    pub(crate) fail_open: bool,
    pub(crate) unavailable_retry_after: Duration,
    pub(crate) store_sensitive_headers: bool,
    pub(crate) renderer: Arc<dyn RenderRefusal>,
    pub(crate) grpc: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            scope: Scope::new("http"),
            key: KeySource::Header(IDEMPOTENCY_KEY),
            methods: vec![Method::POST, Method::PATCH],
            paths: None,
            require_key: true,
            principal: None,
            fingerprint: FingerprintSource::Request,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_stored_bytes: DEFAULT_MAX_STORED_BYTES,
            max_stored_headers: DEFAULT_MAX_STORED_HEADERS,
            max_stored_header_bytes: DEFAULT_MAX_STORED_HEADER_BYTES,
            keep_alive: true,
            in_flight: InFlightPolicy::Reject,
            storage: StoragePolicy::Standard,
            fail_open: false,
            unavailable_retry_after: Duration::from_secs(1),
            store_sensitive_headers: false,
            renderer: Arc::new(ProblemJson::new()),
            grpc: false,
        }
    }
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("namespace", &self.scope.namespace())
            .field("key", &self.key)
            .field("methods", &self.methods)
            .field("paths", &self.paths)
            .field("require_key", &self.require_key)
            .field("fingerprint", &self.fingerprint)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("max_stored_bytes", &self.max_stored_bytes)
            .field("max_stored_headers", &self.max_stored_headers)
            .field("max_stored_header_bytes", &self.max_stored_header_bytes)
            .field("keep_alive", &self.keep_alive)
            .field("in_flight", &self.in_flight)
            .field("storage", &self.storage)
            .field("fail_open", &self.fail_open)
            .field("grpc", &self.grpc)
            .finish_non_exhaustive()
    }
}

impl Settings {
    /// Whether a request is guarded at all (method, path, and in gRPC mode the content type).
    pub(crate) fn applies(&self, method: &Method, path: &str, headers: &HeaderMap) -> bool {
        if !self.methods.contains(method) {
            return false;
        }
        if let Some(paths) = &self.paths
            && !paths.iter().any(|p| p == path)
        {
            return false;
        }
        #[cfg(feature = "grpc")]
        if self.grpc {
            return headers
                .get(http::header::CONTENT_TYPE)
                .is_some_and(|ct| crate::grpc::is_grpc_content_type(ct.as_bytes()));
        }
        #[cfg(not(feature = "grpc"))]
        let _ = headers;
        true
    }

    /// Whether the body must be collected before claiming.
    pub(crate) fn needs_body(&self) -> bool {
        self.key.needs_body() || self.fingerprint.needs_body()
    }

    /// The scope of a request: the namespace, and the principal if one is extracted (no
    /// allocation without one).
    pub(crate) fn scope_for(&self, parts: &Parts) -> Cow<'_, Scope> {
        match self
            .principal
            .as_ref()
            .and_then(|principal| principal(parts))
        {
            Some(principal) => Cow::Owned(self.scope.clone().with_principal(principal)),
            None => Cow::Borrowed(&self.scope),
        }
    }
}
