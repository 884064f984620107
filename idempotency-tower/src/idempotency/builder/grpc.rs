//! The builder's gRPC preset (feature `grpc`).

use std::sync::Arc;

use http::Method;
use idempotency_core::{DEFAULT_IN_FLIGHT_WAIT, InFlightPolicy, Scope, Store};

use super::IdempotencyLayerBuilder;
use crate::idempotency::config::Choice;
use crate::key_source::KeySource;
use crate::policy::StoragePolicy;

impl<S: Store, C> IdempotencyLayerBuilder<S, C> {
    /// The gRPC preset: key from metadata `idempotency-key`, namespace `"grpc"`, only gRPC
    /// POSTs guarded (`application/grpc[+…]`; gRPC-Web and everything else pass through), refusals
    /// as gRPC statuses ([`GrpcStatus`](crate::GrpcStatus)), storage decided by `grpc-status`
    /// ([`StoragePolicy::Grpc`]), replays with their metadata, message, trailers and
    /// `idempotent-replayed: true`. A duplicate in flight waits for the first
    /// ([`DEFAULT_IN_FLIGHT_WAIT`], 5 s, and never past the call's `grpc-timeout`): gRPC
    /// clients retry on their deadline and read no retry hint, so an `ABORTED` would fail the
    /// retry of a call that is about to succeed.
    ///
    /// Streaming calls must pass through, and the layer cannot tell them from unary calls by
    /// their headers. So: list the unary methods to guard with [`only_paths`](Self::only_paths)
    /// (every other call passes through untouched); this is required when the service has
    /// bidirectional-streaming methods, since the layer would wait for the whole request stream.
    /// As a safety net, a guarded call whose request is not exactly one message (client
    /// streaming) passes through unguarded. Without a list every gRPC call is guarded, which suits
    /// services whose methods are all unary.
    ///
    /// The principal that scopes keys must come from a tower layer **outside** this one (see
    /// [`principal_from_extension`](Self::principal_from_extension)): tonic interceptors run
    /// inside it, after the replay has been answered, so metadata they verify is unverified
    /// here.
    ///
    /// ```
    /// use idempotency_core::MemoryStore;
    /// use idempotency_tower::IdempotencyLayer;
    ///
    /// /// Put in the request's extensions by an authentication layer outside this one.
    /// struct Tenant(String);
    /// impl AsRef<str> for Tenant {
    ///     fn as_ref(&self) -> &str {
    ///         &self.0
    ///     }
    /// }
    ///
    /// let layer = IdempotencyLayer::builder(MemoryStore::new())
    ///     .grpc()
    ///     .namespace("payments.grpc")
    ///     .principal_from_extension::<Tenant>()
    ///     .only_paths(["/payments.v1.Payments/Pay", "/payments.v1.Payments/Refund"])
    ///     .build();
    /// // tonic: Server::builder().layer(layer).add_service(PaymentsServer::new(service))
    /// # let _ = layer;
    /// ```
    pub fn grpc(mut self) -> Self {
        self.settings.grpc = true;
        self.preset(Choice::Namespace, |s| s.scope = Scope::new("grpc"));
        self.preset(Choice::Key, |s| {
            s.key = KeySource::Header(crate::headers::IDEMPOTENCY_KEY);
            s.key_status = None;
        });
        self.preset(Choice::Methods, |s| s.methods = vec![Method::POST]);
        self.preset(Choice::Storage, |s| s.storage = StoragePolicy::Grpc);
        self.preset(Choice::Refusals, |s| {
            s.renderer = Arc::new(crate::grpc::GrpcStatus);
        });
        self.preset(Choice::InFlight, |s| {
            s.in_flight = InFlightPolicy::Wait {
                max: DEFAULT_IN_FLIGHT_WAIT,
            };
        });
        self
    }
}
