//! The builder's choice of the scope of keys: per principal (tenant, user, API client) or one
//! scope shared by every caller. The layer cannot be built before it is made.

use std::marker::PhantomData;
use std::sync::Arc;

use http::HeaderName;
use http::request::Parts;
use idempotency_core::Store;

use super::IdempotencyLayerBuilder;
use crate::idempotency::config::{PrincipalSource, ScopeChosen};

impl<S: Store, C> IdempotencyLayerBuilder<S, C> {
    fn scoped(mut self, principal: PrincipalSource) -> IdempotencyLayerBuilder<S, ScopeChosen> {
        self.settings.principal = principal;
        IdempotencyLayerBuilder {
            engine: self.engine,
            settings: self.settings,
            claim_permits: self.claim_permits,
            scoping: PhantomData,
        }
    }

    /// Scopes keys by the principal (tenant, user, API client) that an outer, verified
    /// authentication layer put in the request's extensions as a `T`: two principals never
    /// share a record, whatever key they send, and a request without a `T` (or with an empty
    /// one) is refused with 401 (gRPC `UNAUTHENTICATED`).
    ///
    /// The authentication layer must run **before** this one (added after it with
    /// `Router::layer`, or outside it in a `ServiceBuilder`). For gRPC, tonic interceptors run
    /// inside the layer: put the authentication in a tower layer outside it.
    ///
    /// ```
    /// use idempotency_core::MemoryStore;
    /// use idempotency_tower::IdempotencyLayer;
    ///
    /// /// Put in the request's extensions by the authentication middleware.
    /// #[derive(Clone)]
    /// struct TenantId(String);
    ///
    /// impl AsRef<str> for TenantId {
    ///     fn as_ref(&self) -> &str {
    ///         &self.0
    ///     }
    /// }
    ///
    /// let layer = IdempotencyLayer::builder(MemoryStore::new())
    ///     .namespace("orders")
    ///     .principal_from_extension::<TenantId>()
    ///     .build();
    /// # let _ = layer;
    /// ```
    pub fn principal_from_extension<T>(self) -> IdempotencyLayerBuilder<S, ScopeChosen>
    where
        T: AsRef<str> + Send + Sync + 'static,
    {
        self.principal(|parts| {
            parts
                .extensions
                .get::<T>()
                .map(|principal| principal.as_ref().to_owned())
        })
    }

    /// Scopes keys by the principal a function of the request head names: two principals never
    /// share a record, whatever key they send. `None` (or an empty principal) refuses the
    /// request with 401 (gRPC `UNAUTHENTICATED`): it is never folded into a shared scope.
    ///
    /// Derive the principal from an authenticated identity (see
    /// [`principal_from_extension`](Self::principal_from_extension)), never from what the client
    /// chooses freely.
    pub fn principal(
        self,
        principal: impl Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    ) -> IdempotencyLayerBuilder<S, ScopeChosen> {
        self.scoped(PrincipalSource::Each(Arc::new(principal)))
    }

    /// Scopes keys by the value of a header (e.g. `X-Tenant-Id`), see
    /// [`principal`](Self::principal). Only for a header that a trusted proxy in front of the
    /// service sets after authenticating the caller (and strips from what clients send). A
    /// request without it, or whose value is not UTF-8, is refused with 401.
    pub fn principal_header(self, name: HeaderName) -> IdempotencyLayerBuilder<S, ScopeChosen> {
        self.principal(move |parts| {
            let value = parts.headers.get(&name)?;
            // Exact bytes or nothing: a lossy conversion would let distinct principals collide.
            std::str::from_utf8(value.as_bytes())
                .ok()
                .map(str::to_owned)
        })
    }

    /// One scope for every caller: any caller's key answers for everyone's. For senders whose
    /// requests are authenticated by [`verify`](Self::verify) (a payment gateway's signed
    /// callbacks), or services with a single trusted client. Without `verify`, building logs a
    /// warning: whoever knows or guesses a key gets its stored response.
    ///
    /// ```
    /// use idempotency_core::MemoryStore;
    /// use idempotency_tower::IdempotencyLayer;
    ///
    /// let layer = IdempotencyLayer::builder(MemoryStore::new())
    ///     .namespace("payments.callback")
    ///     .callback("/trade_no")
    ///     .shared_scope()
    ///     .verify(|parts, _body| {
    ///         parts.headers.get("x-signature").map(|_| ()).ok_or_else(|| "unsigned".to_owned())
    ///     })
    ///     .build();
    /// # let _ = layer;
    /// ```
    pub fn shared_scope(self) -> IdempotencyLayerBuilder<S, ScopeChosen> {
        self.scoped(PrincipalSource::Shared)
    }
}
