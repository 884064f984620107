//! The token contract: a token, what consuming it found, and the stores that issue and consume
//! them.

use std::future::Future;
use std::time::{Duration, SystemTime};

use base64::Engine as _;

use idempotency_core::{Scope, StorageKey, StoreError};

/// Default token lifetime: 30 minutes, longer than a typical front-end session's form.
pub const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(30 * 60);

/// An issued token: 256 random bits, URL-safe base64 without padding (43 characters).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OneTimeToken {
    /// The token text to hand to the client.
    pub value: String,
    /// When it stops being accepted.
    pub expires_at: SystemTime,
}

impl OneTimeToken {
    /// Draws a fresh random token valid for `ttl`.
    pub fn generate(ttl: Duration) -> Result<Self, StoreError> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)
            .map_err(|error| StoreError::Backend(format!("no randomness: {error}").into()))?;
        Ok(Self {
            value: base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes),
            expires_at: SystemTime::now() + ttl,
        })
    }

    /// The hashed key a store keeps this token under (the raw token is never stored).
    pub fn storage_key(scope: &Scope, token: &str) -> StorageKey {
        scope.derive(b"token", token.as_bytes())
    }
}

/// What [`TokenStore::consume`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenOutcome {
    /// The token was valid and is now used up: go ahead, exactly once.
    Consumed,
    /// Unknown, expired or already used.
    Invalid,
}

/// Issues and consumes one-time tokens; `consume` is one atomic check-and-delete.
pub trait TokenStore: Send + Sync + 'static {
    /// Issues a token for `scope` (a form, optionally per user), valid for `ttl`.
    fn issue(
        &self,
        scope: &Scope,
        ttl: Duration,
    ) -> impl Future<Output = Result<OneTimeToken, StoreError>> + Send;

    /// Consumes `token` in `scope`: [`TokenOutcome::Consumed`] exactly once, then
    /// [`TokenOutcome::Invalid`].
    fn consume(
        &self,
        scope: &Scope,
        token: &str,
    ) -> impl Future<Output = Result<TokenOutcome, StoreError>> + Send;
}

impl<T: TokenStore> TokenStore for std::sync::Arc<T> {
    fn issue(
        &self,
        scope: &Scope,
        ttl: Duration,
    ) -> impl Future<Output = Result<OneTimeToken, StoreError>> + Send {
        (**self).issue(scope, ttl)
    }
    fn consume(
        &self,
        scope: &Scope,
        token: &str,
    ) -> impl Future<Output = Result<TokenOutcome, StoreError>> + Send {
        (**self).consume(scope, token)
    }
}
