//! The scope of a layer's keys, chosen deliberately before the layer can be built: per
//! principal (tenant, user, API client) or one scope shared by every caller.

use std::borrow::Cow;
use std::marker::PhantomData;
use std::sync::Arc;

use http::HeaderName;
use http::request::Parts;
use idempotency_core::{Scope, Store};

use super::builder::IdempotencyLayerBuilder;
use super::settings::{PrincipalFn, Settings};
use crate::refusal::{Refusal, RefusalKind};

/// The builder's state before the scope of keys is chosen: it has no `build`.
#[derive(Clone, Copy, Debug, Default)]
pub struct ScopeUnchosen;

/// The builder's state once the scope of keys is chosen: it can be built.
#[derive(Clone, Copy, Debug, Default)]
pub struct ScopeChosen;

/// Implemented by [`ScopeChosen`] only: a layer is built once its scope of keys is chosen.
#[diagnostic::on_unimplemented(
    message = "choose the scope of idempotency keys before building the layer",
    label = "no scope chosen yet",
    note = "per principal: `.principal_from_extension::<T>()` (the identity your authentication layer put in the request's extensions), `.principal(|parts| ..)` or `.principal_header(name)`",
    note = "one scope for every caller: `.shared_scope()` (a gateway's signed callbacks, with `.verify(..)`)"
)]
pub trait ScopeIsChosen: sealed::Sealed {}

impl ScopeIsChosen for ScopeChosen {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::ScopeChosen {}
}

/// Where a layer's keys are scoped.
#[derive(Clone)]
pub(crate) enum PrincipalSource {
    /// One scope for every caller (the namespace's).
    Shared,
    /// Each request's principal; a request without one is refused.
    Each(Arc<PrincipalFn>),
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

    /// Whether keys share one scope with no verification of the callers.
    pub(crate) fn shared_unverified(&self) -> bool {
        matches!(self.principal, PrincipalSource::Shared) && self.verify.is_none()
    }
}

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

/// Logs, once per layer built, a layer whose keys are shared by callers nobody verifies.
pub(crate) fn warn_if_shared_unverified(settings: &Settings) {
    if settings.shared_unverified() {
        tracing::warn!(
            namespace = settings.scope.namespace(),
            "idempotency layer with a shared scope and no `verify`: every caller's key answers \
             for every other caller, so anyone who knows or guesses a key gets its stored \
             response; scope keys per principal unless all callers are trusted"
        );
    }
}
