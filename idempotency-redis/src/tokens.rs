//! [`RedisTokenStore`]: one-time tokens consumed by one atomic `DEL`.

use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::{ConnectionLike, ConnectionManager};

use super::error::{bounded, map_error, millis};
use super::store::DEFAULT_CALL_TIMEOUT;
use crate::time::unix_millis;
use idempotency_core::{Scope, StorageKey, StoreError};
use idempotency_token::{OneTimeToken, TokenOutcome, TokenStore};

/// Default prefix of token keys.
pub const DEFAULT_TOKEN_PREFIX: &str = "idempotency:token:";

/// One-time tokens in Redis or Redis Cluster (see [`TokenStore`]).
///
/// A token is kept under the hash of (scope, token) — never the raw token — with a native TTL
/// (the `ttl` given to [`issue`](TokenStore::issue); [`idempotency_token::DEFAULT_TOKEN_TTL`] is 30
/// minutes). [`consume`](TokenStore::consume) is one `DEL`, which checks and deletes in one
/// atomic step (it answers how many keys it removed), so of any number of concurrent submits
/// exactly one is [`TokenOutcome::Consumed`]: no script, and no `GET` before the delete.
///
/// Tokens only stop a user from submitting the same form twice. Payment callbacks, queue
/// redeliveries and RPC retries carry no token: guard them with idempotency keys.
///
/// ```no_run
/// use idempotency_core::Scope;
/// use idempotency_redis::RedisTokenStore;
/// use idempotency_token::{DEFAULT_TOKEN_TTL, TokenOutcome, TokenStore};
/// # async fn run() -> Result<(), idempotency_core::StoreError> {
/// let tokens = RedisTokenStore::connect("redis://127.0.0.1:6379").await?;
/// let scope = Scope::new("checkout").with_principal("user-7");
/// let token = tokens.issue(&scope, DEFAULT_TOKEN_TTL).await?;
/// assert_eq!(tokens.consume(&scope, &token.value).await?, TokenOutcome::Consumed);
/// # Ok(()) }
/// ```
pub struct RedisTokenStore<C = ConnectionManager> {
    connection: C,
    prefix: Arc<str>,
    call_timeout: Duration,
}

impl<C: Clone> Clone for RedisTokenStore<C> {
    fn clone(&self) -> Self {
        Self {
            connection: self.connection.clone(),
            prefix: Arc::clone(&self.prefix),
            call_timeout: self.call_timeout,
        }
    }
}

impl<C> std::fmt::Debug for RedisTokenStore<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTokenStore")
            .field("prefix", &self.prefix)
            .field("call_timeout", &self.call_timeout)
            .finish_non_exhaustive()
    }
}

super::connect::connecting_constructors!(RedisTokenStore);

impl<C> RedisTokenStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A token store over an open connection (it may be shared with a [`super::RedisStore`]).
    pub fn new(connection: C) -> Self {
        Self {
            connection,
            prefix: Arc::from(DEFAULT_TOKEN_PREFIX),
            call_timeout: DEFAULT_CALL_TIMEOUT,
        }
    }

    /// Prefixes every token key (default `idempotency:token:`).
    pub fn with_key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Arc::from(prefix.into());
        self
    }

    /// Bounds each call (default 2 s); past it the call fails with [`StoreError::Timeout`].
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// A token store opened by its constructors: nothing more to set up.
    pub(crate) fn opened_by(self, _client: &::redis::Client) -> Self {
        self
    }

    /// A token store opened on a Cluster: nothing more to set up.
    pub(crate) fn opened_on(self, _nodes: Vec<String>) -> Self {
        self
    }

    fn token_key(&self, key: &StorageKey) -> String {
        format!("{}{{{}}}", self.prefix, key.to_hex())
    }
}

impl<C> TokenStore for RedisTokenStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    async fn issue(&self, scope: &Scope, ttl: Duration) -> Result<OneTimeToken, StoreError> {
        let token = OneTimeToken::generate(ttl)?;
        let key = self.token_key(&OneTimeToken::storage_key(scope, &token.value));
        // The key's native TTL is the token's lifetime; the value (the expiry in Unix ms) is
        // only there for operators.
        let mut command = ::redis::cmd("SET");
        command
            .arg(key)
            .arg(unix_millis(token.expires_at))
            .arg("PX")
            .arg(millis(ttl))
            .arg("NX");
        let mut connection = self.connection.clone();
        let limit = self.call_timeout;
        let stored: Option<String> = bounded(limit, async {
            let reply = command.query_async(&mut connection).await;
            reply.map_err(|error| map_error(error, limit))
        })
        .await?;
        match stored {
            Some(_) => Ok(token),
            None => Err(StoreError::Backend(
                "a freshly drawn random token already existed".into(),
            )),
        }
    }

    async fn consume(&self, scope: &Scope, token: &str) -> Result<TokenOutcome, StoreError> {
        let key = self.token_key(&OneTimeToken::storage_key(scope, token));
        // `DEL` answers how many keys it removed: 1 for exactly one of any concurrent calls.
        // Expiry is the key's native TTL (the server's clock alone decides, never the issuer's).
        let mut command = ::redis::cmd("DEL");
        command.arg(key);
        let mut connection = self.connection.clone();
        let limit = self.call_timeout;
        let consumed: i64 = bounded(limit, async {
            let reply = command.query_async(&mut connection).await;
            reply.map_err(|error| map_error(error, limit))
        })
        .await?;
        Ok(if consumed == 1 {
            TokenOutcome::Consumed
        } else {
            TokenOutcome::Invalid
        })
    }
}
