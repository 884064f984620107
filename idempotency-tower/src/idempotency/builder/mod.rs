//! The layer's builder: the type, and the settings that are neither a preset (`presets`,
//! `grpc`) nor the scope of keys (`scoping`).

#[cfg(feature = "grpc")]
mod grpc;
#[cfg(test)]
mod preset_order;
mod presets;
mod scoping;

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderName, Method};
use idempotency_core::background::Tracker;
use idempotency_core::{
    Fingerprint, Idempotency, IdempotencyKey, InFlightPolicy, KeyError, Scope, Store,
};

use super::config::{Choice, ScopeIsChosen, ScopeUnchosen, Settings, warn_if_shared_unverified};
use super::layer::IdempotencyLayer;
use crate::callback::ConflictAnswer;
use crate::fingerprint::FingerprintSource;
use crate::key_source::KeySource;
use crate::policy::StoragePolicy;
use crate::refusal::RenderRefusal;

/// Configures an [`IdempotencyLayer`] (or, over a SQL store, a
/// [`TransactionalLayer`](crate::transactional::TransactionalLayer)); start with
/// [`IdempotencyLayer::builder`].
///
/// The defaults are the **API preset** (the IETF draft's and Stripe's behaviour): key from the
/// `Idempotency-Key` header, required; fingerprint of method, target and body; 2xx, 3xx and most
/// 4xx stored; a duplicate in flight answered 409 at once. [`callback`](Self::callback) and
/// [`grpc`](Self::grpc) are the other presets. A preset never overrides a setting made on the
/// builder, before or after it: `.namespace("x").grpc()` keeps `"x"`.
///
/// There is no default **scope**: a layer is built only once it is chosen (the second type
/// parameter tracks it), per principal with
/// [`principal_from_extension`](Self::principal_from_extension),
/// [`principal`](Self::principal) or [`principal_header`](Self::principal_header), or shared by
/// every caller with [`shared_scope`](Self::shared_scope). Without it, `build` does not compile:
///
/// ```compile_fail,E0277
/// use idempotency_core::MemoryStore;
/// use idempotency_tower::IdempotencyLayer;
///
/// let layer = IdempotencyLayer::builder(MemoryStore::new()).namespace("orders").build();
/// ```
pub struct IdempotencyLayerBuilder<S, C = ScopeUnchosen> {
    pub(crate) engine: Idempotency<S>,
    pub(crate) settings: Settings,
    /// Transactional HTTP: how many claims may wait on other transactions at once.
    pub(crate) claim_permits: Option<usize>,
    /// Whether the scope of keys is chosen ([`ScopeUnchosen`], [`ScopeChosen`](crate::ScopeChosen)).
    pub(crate) scoping: PhantomData<C>,
}

impl<S, C> std::fmt::Debug for IdempotencyLayerBuilder<S, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyLayerBuilder")
            .field("engine", &self.engine)
            .field("settings", &self.settings)
            .finish()
    }
}

impl<S: Store> IdempotencyLayer<S> {
    /// Starts configuring a layer over `store`. Choose the scope of its keys (per principal or
    /// shared) before [`build`](IdempotencyLayerBuilder::build): see [`IdempotencyLayerBuilder`].
    pub fn builder(store: S) -> IdempotencyLayerBuilder<S> {
        IdempotencyLayerBuilder::new(Idempotency::new(store))
    }

    /// Starts configuring a layer over an engine configured elsewhere (shared with other front
    /// ends, say). Its lease, TTL, store timeout and keep-alive settings are kept; the layer's
    /// copy of the engine renews leases inline instead of in a background task, the engine
    /// passed in is not changed.
    pub fn builder_with_engine(engine: Idempotency<S>) -> IdempotencyLayerBuilder<S> {
        IdempotencyLayerBuilder::new(engine)
    }
}

impl<S: Store> IdempotencyLayerBuilder<S> {
    pub(crate) fn new(engine: Idempotency<S>) -> Self {
        // The layer renews leases from the task that already runs the handler
        // (`Execution::keep_alive_while`), so the engine spawns no keep-alive task of its own.
        let (keep_alive, ceiling) = (
            engine.config().keep_alive,
            engine.config().keep_alive_ceiling,
        );
        Self {
            engine: engine.with_keep_alive(false, ceiling),
            settings: Settings {
                keep_alive,
                ..Settings::default()
            },
            claim_permits: None,
            scoping: PhantomData,
        }
    }
}

impl<S: Store, C> IdempotencyLayerBuilder<S, C> {
    /// The finished layer. Exists once the scope of keys is chosen (see the type's docs).
    pub fn build(mut self) -> IdempotencyLayer<S>
    where
        C: ScopeIsChosen,
    {
        self.settings.prepare(self.engine.tracker());
        warn_if_shared_unverified(&self.settings);
        IdempotencyLayer::new_shared(self.engine, self.settings)
    }

    /// The namespace keys live in (default `"http"`; the gRPC preset uses `"grpc"`). Give each
    /// API its own when several share a store.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.settings.scope = Scope::new(namespace);
        self.settings.explicit.mark(Choice::Namespace);
        self
    }

    /// Reads the key from this header instead of `Idempotency-Key`.
    pub fn key_header(self, name: HeaderName) -> Self {
        self.key_source(KeySource::Header(name))
    }

    /// Reads the key from a field of the JSON body, e.g. `/trade_no` (see
    /// [`KeySource::JsonPointer`] for the rules).
    pub fn key_from_json(self, pointer: impl Into<String>) -> Self {
        self.key_source(KeySource::JsonPointer(pointer.into()))
    }

    /// Reads the key with a user function over the request head and the collected body.
    pub fn key_with(
        self,
        read: impl Fn(&Parts, &Bytes) -> Result<Option<IdempotencyKey>, KeyError>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        self.key_source(KeySource::Custom(Arc::new(read)))
    }

    /// Sets where the key comes from.
    pub fn key_source(mut self, source: KeySource) -> Self {
        self.settings.key = source;
        self.settings.key_status = None;
        self.settings.explicit.mark(Choice::Key);
        self
    }

    /// The methods guarded (default POST and PATCH); requests with other methods pass through.
    pub fn methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.settings.methods = methods.into_iter().collect();
        self.settings.explicit.mark(Choice::Methods);
        self
    }

    /// Guards only requests to these exact paths; others pass through (default: every path).
    /// In gRPC mode list the unary methods, e.g. `/payments.v1.Payments/Pay`. What is guarded
    /// is logged once when the layer is built (INFO, target `idempotency`).
    ///
    /// # Panics
    ///
    /// [`build`](Self::build) panics, naming every bad entry, if one cannot match any request:
    /// empty, no leading `/`, whitespace or control characters, a query or fragment, a route
    /// pattern (`{id}`, `:id`, `*rest`), an empty segment, not a URI path, or in gRPC mode not
    /// `/package.Service/Method`; or if the list is empty. A mistyped path would otherwise
    /// turn deduplication off for the route it meant with no sign; like an invalid route in
    /// axum's `Router::route`, it is a programming error that must stop the service at
    /// start-up, not a runtime condition every caller of `build` should handle.
    ///
    /// ```should_panic
    /// use idempotency_core::MemoryStore;
    /// use idempotency_tower::IdempotencyLayer;
    ///
    /// // "orders" has no leading '/': it could never match, so building panics.
    /// let layer = IdempotencyLayer::builder(MemoryStore::new())
    ///     .only_paths(["orders"])
    ///     .shared_scope()
    ///     .build();
    /// # let _ = layer;
    /// ```
    pub fn only_paths<P: Into<String>>(mut self, paths: impl IntoIterator<Item = P>) -> Self {
        self.settings.paths = Some(paths.into_iter().map(Into::into).collect());
        self
    }

    /// Checks the guarded gRPC methods against the service's encoded `FileDescriptorSet`
    /// (`tonic-build`'s `file_descriptor_set_path`, or `protox`), when the layer is built:
    /// each [`only_paths`](Self::only_paths) entry must be a unary method of the set, else
    /// [`build`](Self::build) panics naming it and listing the unary methods; with no list,
    /// every unary method of the set is guarded and streaming ones pass through.
    ///
    /// # Panics
    ///
    /// If `encoded` is not an encoded `FileDescriptorSet` declaring at least one method.
    ///
    /// ```
    /// use idempotency_core::MemoryStore;
    /// use idempotency_tower::IdempotencyLayer;
    /// # use prost::Message;
    /// # use prost_types::{FileDescriptorProto, FileDescriptorSet, MethodDescriptorProto, ServiceDescriptorProto};
    /// # let method = |name: &str| MethodDescriptorProto { name: Some(name.into()), ..Default::default() };
    /// # let service = ServiceDescriptorProto { name: Some("Payments".into()), method: vec![method("Pay")], ..Default::default() };
    /// # let file = FileDescriptorProto { package: Some("payments.v1".into()), service: vec![service], ..Default::default() };
    /// # let encoded = FileDescriptorSet { file: vec![file] }.encode_to_vec();
    /// # let payments_descriptor: &[u8] = &encoded;
    ///
    /// // build.rs: tonic_prost_build::configure()
    /// //     .file_descriptor_set_path(out_dir.join("payments_descriptor.bin"))
    /// // and in the service:
    /// // let payments_descriptor: &[u8] =
    /// //     include_bytes!(concat!(env!("OUT_DIR"), "/payments_descriptor.bin"));
    /// let layer = IdempotencyLayer::builder(MemoryStore::new())
    ///     .grpc()
    ///     .grpc_descriptor(payments_descriptor)
    ///     .only_paths(["/payments.v1.Payments/Pay"]) // checked; without it, every unary method
    ///     .shared_scope()
    ///     .build();
    /// # let _ = layer;
    /// ```
    #[cfg(feature = "grpc-descriptor")]
    pub fn grpc_descriptor(mut self, encoded: &[u8]) -> Self {
        match super::config::GrpcMethods::decode(encoded) {
            Ok(methods) => self.settings.grpc_methods = Some(Arc::new(methods)),
            Err(error) => panic!("grpc_descriptor: {error}"),
        }
        self
    }

    /// Whether the key is required (default `true`): a request without one is refused with 400;
    /// when optional it passes through untouched (with a header key, its body is not read).
    pub fn require_key(mut self, required: bool) -> Self {
        self.settings.require_key = required;
        self
    }

    /// Verifies each guarded request before its key is claimed (a payment gateway's callback
    /// signature, say): `Err(detail)` answers 401 (gRPC `UNAUTHENTICATED`), claims nothing and
    /// runs nothing, so a forged request carrying a real key can neither run nor take the key
    /// from the real one, nor read its stored answer. The function sees the request head and the
    /// whole body (which the layer then reads, within [`max_body_bytes`](Self::max_body_bytes)).
    ///
    /// ```
    /// use idempotency_core::MemoryStore;
    /// use idempotency_tower::IdempotencyLayer;
    ///
    /// let layer = IdempotencyLayer::builder(MemoryStore::new())
    ///     .callback("/trade_no")
    ///     .shared_scope()
    ///     .verify(|parts, body| {
    ///         let signature = parts.headers.get("x-signature").ok_or("no signature")?;
    ///         // check the gateway's HMAC of `body` against `signature` here
    ///         let _ = (signature, body);
    ///         Ok(())
    ///     })
    ///     .build();
    /// # let _ = layer;
    /// ```
    pub fn verify(
        mut self,
        verify: impl Fn(&Parts, &Bytes) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.settings.verify = Some(Arc::new(verify));
        self
    }

    /// Sets what the fingerprint covers (default [`FingerprintSource::Request`]).
    pub fn fingerprint(mut self, source: FingerprintSource) -> Self {
        self.settings.fingerprint = source;
        self.settings.explicit.mark(Choice::Fingerprint);
        self
    }

    /// Fingerprints method, path and these JSON fields of the body (JSON Pointers), see
    /// [`FingerprintSource::JsonFields`].
    pub fn fingerprint_json_fields<P: Into<String>>(
        self,
        pointers: impl IntoIterator<Item = P>,
    ) -> Self {
        self.fingerprint(FingerprintSource::json_fields(pointers))
    }

    /// Fingerprints method, target and these headers (the body is not read).
    pub fn fingerprint_headers(self, names: impl IntoIterator<Item = HeaderName>) -> Self {
        let names: Vec<HeaderName> = names.into_iter().collect();
        self.fingerprint(FingerprintSource::Headers(names.into()))
    }

    /// Fingerprints with a user function.
    pub fn fingerprint_with(
        self,
        compute: impl Fn(&Parts, &Bytes) -> Fingerprint + Send + Sync + 'static,
    ) -> Self {
        self.fingerprint(FingerprintSource::Custom(Arc::new(compute)))
    }

    /// The fingerprint this layer computed before a change of [`fingerprint`](Self::fingerprint),
    /// read for one TTL after deploying the change: a retry whose record was written under the
    /// previous fingerprint (by an instance not yet upgraded, or before the deploy) is a
    /// duplicate, answered with its stored response (or, while it runs, as in flight), not a
    /// conflict. Costs one more fingerprint per request while set, and one read of the record
    /// when a key meets another fingerprint. Remove it once a TTL has passed since the last
    /// instance changed.
    ///
    /// ```
    /// use idempotency_core::MemoryStore;
    /// use idempotency_tower::{FingerprintSource, IdempotencyLayer};
    ///
    /// // Was the whole request; now the order's business fields.
    /// let layer = IdempotencyLayer::builder(MemoryStore::new())
    ///     .namespace("orders")
    ///     .shared_scope()
    ///     .fingerprint_json_fields(["/order_id", "/amount"])
    ///     .previous_fingerprint(FingerprintSource::Request)
    ///     .build();
    /// # let _ = layer;
    /// ```
    pub fn previous_fingerprint(mut self, source: FingerprintSource) -> Self {
        self.settings.previous_fingerprint = Some(source);
        self
    }

    /// Runs the layer's background work (handlers of departed clients, retried completes and
    /// releases) under `tracker`, which the application shares with its other layers and
    /// engines and waits for on shutdown ([`Tracker::shutdown`]). Each layer has a tracker of
    /// its own otherwise ([`IdempotencyLayer::tracker`]).
    pub fn tracker(mut self, tracker: Tracker) -> Self {
        self.engine = self.engine.with_tracker(tracker);
        self
    }

    /// How long completed responses are kept and replayed (default 24 h).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.engine = self.engine.with_ttl(ttl);
        self
    }

    /// The processing lease (default 60 s), renewed while the handler runs.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.engine = self.engine.with_lease(lease);
        self
    }

    /// The longest each store call may take before it counts as failed (default 2 s).
    pub fn store_timeout(mut self, timeout: Duration) -> Self {
        self.engine = self.engine.with_store_timeout(timeout);
        self
    }

    /// Lease renewal while the handler runs, and its ceiling (default on, 10 min).
    pub fn keep_alive(mut self, enabled: bool, ceiling: Duration) -> Self {
        self.settings.keep_alive = enabled;
        self.engine = self.engine.with_keep_alive(false, ceiling);
        self
    }

    /// Transactional HTTP ([`build_transactional`](Self::build_transactional)): how many claims
    /// may wait on another transaction's uncommitted record at once (default: half the pool's
    /// connections). Duplicates of one key in one process already wait in memory, one at a
    /// time; this bounds the connections that duplicates of many keys hold while they wait.
    pub fn claim_permits(mut self, permits: usize) -> Self {
        self.claim_permits = Some(permits);
        self
    }

    /// The largest request body the layer reads (default 1 MiB); larger → 413.
    pub fn max_body_bytes(mut self, limit: usize) -> Self {
        self.settings.max_body_bytes = limit;
        self
    }

    /// How long the layer waits for the request body it reads (for a key, fingerprint or
    /// verification in the body; default [`DEFAULT_BODY_READ_TIMEOUT`](crate::DEFAULT_BODY_READ_TIMEOUT),
    /// 30 s), counted from the first wait for it; slower → 408 (gRPC `DEADLINE_EXCEEDED`), with
    /// nothing claimed, stored or begun (no transaction is open yet). The transactional layer
    /// always reads the body first, so no transaction waits on a slow client. The plain layer
    /// streams a body it does not need (a header key with a header fingerprint) to the handler,
    /// which then bounds its own reading (the key is held meanwhile, up to the keep-alive
    /// ceiling).
    pub fn body_read_timeout(mut self, timeout: Duration) -> Self {
        self.settings.body_read_timeout = timeout;
        self
    }

    /// How many handlers whose clients left may still run to their end in the background
    /// (default [`DEFAULT_MAX_DETACHED`](crate::DEFAULT_MAX_DETACHED), 1 024). Beyond it, new
    /// guarded requests are refused with 503 + `Retry-After` (gRPC `UNAVAILABLE`) until some
    /// end: running handlers are never abandoned.
    pub fn max_detached(mut self, max: usize) -> Self {
        self.settings.max_detached = max;
        self
    }

    /// The largest response body stored (default 1 MiB). A larger response still reaches the
    /// client in full, but only a marker is stored: the work is not run again, and a retry gets
    /// 409 "Response not replayable" ([`crate::RefusalKind::NotReplayable`]); a warning is
    /// logged.
    pub fn max_stored_response_bytes(mut self, limit: usize) -> Self {
        self.settings.max_stored_bytes = limit;
        self
    }

    /// The most header and trailer fields a stored response may have (default 100), and the
    /// most bytes their names and values may take together (default 64 KiB). A response past
    /// either bound still reaches the client, but only a "not replayable" marker is stored, as
    /// for [`max_stored_response_bytes`](Self::max_stored_response_bytes).
    pub fn max_stored_headers(mut self, count: usize, bytes: usize) -> Self {
        self.settings.max_stored_headers = count;
        self.settings.max_stored_header_bytes = bytes;
        self
    }

    /// What a duplicate gets while the first is in flight (default
    /// [`InFlightPolicy::Reject`]: 409 at once). A wait never outlives the caller's
    /// [`Deadline`](crate::Deadline) (or, in gRPC mode, its `grpc-timeout`).
    pub fn in_flight(mut self, policy: InFlightPolicy) -> Self {
        self.settings.in_flight = policy;
        self.settings.explicit.mark(Choice::InFlight);
        self
    }

    /// How many duplicates of one in-flight key may wait for it at once in this process
    /// (default [`DEFAULT_MAX_WAITERS_PER_KEY`](idempotency_core::DEFAULT_MAX_WAITERS_PER_KEY),
    /// 128); more are answered 409 + `Retry-After` (gRPC `ABORTED`) at once. Waiters share
    /// one wait per key, so the store's load does not grow with them.
    pub fn max_waiters_per_key(mut self, max: usize) -> Self {
        self.engine = self.engine.with_max_waiters_per_key(max);
        self
    }

    /// Duplicates wait up to `max` for the first to finish, then get its response.
    pub fn wait_in_flight(self, max: Duration) -> Self {
        self.in_flight(InFlightPolicy::Wait { max })
    }

    /// Which responses are stored (default [`StoragePolicy::Standard`]).
    pub fn storage_policy(mut self, policy: StoragePolicy) -> Self {
        self.settings.storage = policy;
        self.settings.explicit.mark(Choice::Storage);
        self
    }

    /// What a request gets whose key was already used with another fingerprint: 422
    /// ([`ConflictAnswer::Reject`], the default) or the stored response, logged at WARN and
    /// counted ([`ConflictAnswer::ReplayStored`], the callback preset's default).
    pub fn on_conflict(mut self, answer: ConflictAnswer) -> Self {
        self.settings.on_conflict = answer;
        self.settings.explicit.mark(Choice::Conflicts);
        self
    }

    /// Stores 5xx responses too ([`StoragePolicy::IncludeServerErrors`]).
    pub fn store_server_errors(self) -> Self {
        self.storage_policy(StoragePolicy::IncludeServerErrors)
    }

    /// When the store fails or times out: `false` (default) answers 503 + `Retry-After`; `true`
    /// lets the request through unguarded, logged and counted
    /// ([`idempotency_core::metrics::FAIL_OPEN`]).
    pub fn fail_open(mut self, open: bool) -> Self {
        self.settings.fail_open = open;
        self
    }

    /// The `Retry-After` of a 503 when the store fails (default 1 s).
    pub fn unavailable_retry_after(mut self, after: Duration) -> Self {
        self.settings.unavailable_retry_after = after;
        self
    }

    /// Whether credential fields are stored and replayed (default `false`): `Set-Cookie`,
    /// `Cookie`, `Authorization`, `WWW-Authenticate`, `Authentication-Info`, `X-Auth-Token`,
    /// `X-Api-Key`, `X-Csrf-Token`, `X-Xsrf-Token`, `X-Amz-Security-Token`, `Set-Cookie2`, and
    /// values marked sensitive (`HeaderValue::set_sensitive`). `Proxy-*` fields are hop-by-hop
    /// and never stored.
    pub fn store_sensitive_headers(mut self, store: bool) -> Self {
        self.settings.store_sensitive_headers = store;
        self
    }

    /// How refusals are rendered (default [`ProblemJson`](crate::ProblemJson)).
    pub fn refusals(mut self, renderer: impl RenderRefusal) -> Self {
        self.settings.renderer = Arc::new(renderer);
        self.settings.explicit.mark(Choice::Refusals);
        self
    }
}
