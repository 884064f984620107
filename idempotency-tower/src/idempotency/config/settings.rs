//! The layer's settings, shared by every clone of its service.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, Method};
use idempotency_core::metrics as names;
use idempotency_core::{InFlightPolicy, Scope};

use super::explicit::Explicit;
use crate::callback::ConflictAnswer;

use crate::detach::Detached;
use crate::fingerprint::FingerprintSource;
use crate::headers::IDEMPOTENCY_KEY;
use crate::json::JsonPlan;
use crate::key_source::KeySource;
use crate::policy::StoragePolicy;
use crate::refusal::{ProblemJson, Refusal, RefusalKind, RenderRefusal};

/// A user function naming the principal (tenant, user, API client) a request acts for; `None`
/// refuses the request (401).
pub type PrincipalFn = dyn Fn(&Parts) -> Option<String> + Send + Sync + 'static;

/// Where a layer's keys are scoped.
#[derive(Clone)]
pub(crate) enum PrincipalSource {
    /// One scope for every caller (the namespace's).
    Shared,
    /// Each request's principal; a request without one is refused.
    Each(Arc<PrincipalFn>),
}

/// A user function that verifies a request before its key is claimed (a callback's
/// signature): `Err(detail)` refuses it with 401, and nothing is claimed.
pub type VerifyFn = dyn Fn(&Parts, &Bytes) -> Result<(), String> + Send + Sync + 'static;

/// Default limit of the request body the layer reads: 1 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;
/// Default time the layer waits for the request body it reads: 30 s (then 408, nothing
/// claimed).
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Default number of handlers whose clients left that may still run in the background, per
/// layer: 1 024 (beyond it, new guarded requests get 503 + `Retry-After`).
pub const DEFAULT_MAX_DETACHED: usize = 1024;
/// Default limit of a response the layer stores: 1 MiB.
pub const DEFAULT_MAX_STORED_BYTES: usize = 1024 * 1024;
/// Default limit of the header (and trailer) fields of a response the layer stores: 100.
pub const DEFAULT_MAX_STORED_HEADERS: usize = 100;
/// Default limit of the bytes of those fields' names and values: 64 KiB.
pub const DEFAULT_MAX_STORED_HEADER_BYTES: usize = 64 * 1024;

/// Everything a layer is configured with, shared by its services.
#[derive(Clone)]
pub(crate) struct Settings {
    /// The layer's scope, its namespace prepared for the engine once built (see
    /// [`Settings::prepare`]).
    pub(crate) scope: Scope,
    pub(crate) counters: Arc<LayerCounters>,
    /// The JSON fields the key and the fingerprint read (see [`Settings::prepare`]).
    pub(crate) json: Arc<JsonPlan>,
    pub(crate) key: KeySource,
    /// A notification's status field, part of its key ([`crate::Callback::status`]).
    pub(crate) key_status: Option<String>,
    pub(crate) methods: Vec<Method>,
    pub(crate) paths: Option<Arc<[String]>>,
    pub(crate) require_key: bool,
    pub(crate) principal: PrincipalSource,
    pub(crate) verify: Option<Arc<VerifyFn>>,
    pub(crate) fingerprint: FingerprintSource,
    /// The fingerprint before a change, read for one TTL after it
    /// ([`previous_fingerprint`](crate::IdempotencyLayerBuilder::previous_fingerprint)).
    pub(crate) previous_fingerprint: Option<FingerprintSource>,
    pub(crate) max_body_bytes: usize,
    pub(crate) body_read_timeout: Duration,
    pub(crate) max_detached: usize,
    /// The handlers of departed clients running in the background now.
    pub(crate) detached: Arc<Detached>,
    pub(crate) max_stored_bytes: usize,
    pub(crate) max_stored_headers: usize,
    pub(crate) max_stored_header_bytes: usize,
    pub(crate) keep_alive: bool,
    pub(crate) in_flight: InFlightPolicy,
    pub(crate) storage: StoragePolicy,
    pub(crate) on_conflict: ConflictAnswer,
    /// The settings the user chose, which presets keep.
    pub(crate) explicit: Explicit,
    pub(crate) fail_open: bool,
    pub(crate) unavailable_retry_after: Duration,
    pub(crate) store_sensitive_headers: bool,
    pub(crate) renderer: Arc<dyn RenderRefusal>,
    pub(crate) grpc: bool,
    /// The service's methods, from its descriptor set: the guarded paths are checked against
    /// them, or are its unary methods when none are listed.
    #[cfg(feature = "grpc-descriptor")]
    pub(crate) grpc_methods: Option<Arc<super::descriptor::GrpcMethods>>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            scope: Scope::new("http"),
            counters: Arc::new(LayerCounters::new("http")),
            json: Arc::default(),
            key: KeySource::Header(IDEMPOTENCY_KEY),
            key_status: None,
            methods: vec![Method::POST, Method::PATCH],
            paths: None,
            require_key: true,
            principal: PrincipalSource::Shared,
            verify: None,
            fingerprint: FingerprintSource::Request,
            previous_fingerprint: None,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            max_detached: DEFAULT_MAX_DETACHED,
            detached: Arc::default(),
            max_stored_bytes: DEFAULT_MAX_STORED_BYTES,
            max_stored_headers: DEFAULT_MAX_STORED_HEADERS,
            max_stored_header_bytes: DEFAULT_MAX_STORED_HEADER_BYTES,
            keep_alive: true,
            in_flight: InFlightPolicy::Reject,
            storage: StoragePolicy::Standard,
            on_conflict: ConflictAnswer::Reject,
            explicit: Explicit::default(),
            fail_open: false,
            unavailable_retry_after: Duration::from_secs(1),
            store_sensitive_headers: false,
            renderer: Arc::new(ProblemJson::new()),
            grpc: false,
            #[cfg(feature = "grpc-descriptor")]
            grpc_methods: None,
        }
    }
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("namespace", &self.scope.namespace())
            .field("key", &self.key)
            .field("key_status", &self.key_status)
            .field("methods", &self.methods)
            .field("paths", &self.paths)
            .field("require_key", &self.require_key)
            .field(
                "per_principal",
                &matches!(self.principal, PrincipalSource::Each(_)),
            )
            .field("verify", &self.verify.is_some())
            .field("fingerprint", &self.fingerprint)
            .field("previous_fingerprint", &self.previous_fingerprint)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("body_read_timeout", &self.body_read_timeout)
            .field("max_detached", &self.max_detached)
            .field("max_stored_bytes", &self.max_stored_bytes)
            .field("max_stored_headers", &self.max_stored_headers)
            .field("max_stored_header_bytes", &self.max_stored_header_bytes)
            .field("keep_alive", &self.keep_alive)
            .field("in_flight", &self.in_flight)
            .field("storage", &self.storage)
            .field("on_conflict", &self.on_conflict)
            .field("fail_open", &self.fail_open)
            .field("grpc", &self.grpc)
            .finish_non_exhaustive()
    }
}

/// Where the layer's counters come from (the module that used to call `counter!`).
static METADATA: metrics::Metadata<'static> = metrics::Metadata::new(
    "idempotency_tower::idempotency::gate",
    metrics::Level::INFO,
    Some("idempotency_tower::idempotency::gate"),
);

/// The layer's own counters (refusals by reason, fail-open passes), their keys built once per
/// layer instead of per event (a refusal's on its kind's first refusal). The recorder is asked
/// at every event, as `counter!` does.
pub(crate) struct LayerCounters {
    namespace: String,
    /// A refusal's key, at its kind's index.
    refusals: [OnceLock<metrics::Key>; RefusalKind::COUNT],
    fail_open: metrics::Key,
    conflicts: metrics::Key,
}

impl LayerCounters {
    pub(super) fn new(namespace: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            refusals: std::array::from_fn(|_| OnceLock::new()),
            fail_open: metrics::Key::from_parts(
                names::FAIL_OPEN,
                vec![metrics::Label::new("namespace", namespace.to_owned())],
            ),
            conflicts: metrics::Key::from_parts(
                names::CONFLICTS,
                vec![metrics::Label::new("namespace", namespace.to_owned())],
            ),
        }
    }

    fn refusal_key(namespace: &str, kind: RefusalKind) -> metrics::Key {
        metrics::Key::from_parts(
            names::REFUSALS,
            vec![
                metrics::Label::new("namespace", namespace.to_owned()),
                metrics::Label::new("reason", kind.slug()),
            ],
        )
    }

    fn increment(key: &metrics::Key) {
        metrics::with_recorder(|recorder| recorder.register_counter(key, &METADATA)).increment(1);
    }

    /// Counts a refusal of `kind`.
    pub(crate) fn refused(&self, namespace: &str, kind: RefusalKind) {
        match self.refusals.get(kind as usize) {
            Some(key) => {
                Self::increment(key.get_or_init(|| Self::refusal_key(&self.namespace, kind)));
            }
            None => Self::increment(&Self::refusal_key(namespace, kind)),
        }
    }

    /// Counts a request let through unguarded because the store failed.
    pub(crate) fn failed_open(&self) {
        Self::increment(&self.fail_open);
    }

    /// Counts a conflict answered with the stored response.
    pub(crate) fn conflicted(&self) {
        Self::increment(&self.conflicts);
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

    /// The refusal of a new guarded request while too many handlers of departed clients still
    /// run ([`RefusalKind::Overloaded`]), if so.
    pub(crate) fn overloaded(&self) -> Option<Refusal> {
        let running = self.detached.running();
        (running >= self.max_detached).then(|| {
            Refusal::new(
                RefusalKind::Overloaded,
                format!("{running} handlers of departed clients are still finishing; retry later"),
            )
            .with_retry_after(self.unavailable_retry_after)
        })
    }

    /// Whether the body must be collected before claiming.
    pub(crate) fn needs_body(&self) -> bool {
        self.key.needs_body()
            || self.fingerprint.needs_body()
            || self
                .previous_fingerprint
                .as_ref()
                .is_some_and(FingerprintSource::needs_body)
            || self.verify.is_some()
    }

    /// The caller's deadline, if it has one ([`Deadline`](crate::Deadline), `grpc-timeout`).
    pub(crate) fn deadline(&self, parts: &Parts) -> Option<std::time::Instant> {
        crate::deadline::of(parts, self.grpc)
    }
}

impl Settings {
    /// The scope of a request: the namespace, and its principal in principal mode (no
    /// allocation in shared mode). A request without a principal (or with an empty one) is
    /// refused in principal mode, never folded into the shared scope.
    pub(crate) fn scope_for(&self, parts: &Parts) -> Result<Cow<'_, Scope>, Refusal> {
        match &self.principal {
            PrincipalSource::Shared => Ok(Cow::Borrowed(&self.scope)),
            PrincipalSource::Each(principal) => match principal(parts) {
                Some(principal) if !principal.is_empty() => {
                    Ok(Cow::Owned(self.scope.clone().with_principal(principal)))
                }
                _ => Err(Refusal::new(
                    RefusalKind::Unauthenticated,
                    "idempotency keys are scoped per principal here, and the request carries none",
                )),
            },
        }
    }

    /// The principal `parts` is scoped to (`None` with a shared scope, or without one).
    #[cfg(feature = "steps")]
    pub(crate) fn principal_of(&self, parts: &Parts) -> Option<String> {
        match &self.principal {
            PrincipalSource::Shared => None,
            PrincipalSource::Each(principal) => principal(parts),
        }
    }

    /// Whether keys share one scope with no verification of the callers.
    pub(crate) fn shared_unverified(&self) -> bool {
        matches!(self.principal, PrincipalSource::Shared) && self.verify.is_none()
    }
}
