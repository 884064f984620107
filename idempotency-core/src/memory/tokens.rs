//! One-time tokens kept in memory.

use std::time::{Duration, SystemTime};

use super::shards::Shards;
use crate::token::{OneTimeToken, TokenOutcome, TokenStore};
use crate::{Scope, StoreError};

/// In-process one-time tokens (see [`TokenStore`]).
///
/// ```
/// use idempotency_core::{MemoryTokenStore, Scope, TokenOutcome, TokenStore};
/// use std::time::Duration;
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let tokens = MemoryTokenStore::new();
/// let scope = Scope::new("checkout").with_principal("user-7");
/// let token = tokens.issue(&scope, Duration::from_secs(1800)).await.unwrap();
/// assert_eq!(tokens.consume(&scope, &token.value).await.unwrap(), TokenOutcome::Consumed);
/// assert_eq!(tokens.consume(&scope, &token.value).await.unwrap(), TokenOutcome::Invalid);
/// # }
/// ```
pub struct MemoryTokenStore {
    tokens: Shards<SystemTime>,
}

impl Default for MemoryTokenStore {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for MemoryTokenStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemoryTokenStore")
    }
}

impl MemoryTokenStore {
    /// An empty token store.
    pub fn new() -> Self {
        Self {
            tokens: Shards::new(),
        }
    }

    /// Deletes expired tokens; returns how many went.
    pub fn purge_expired(&self) -> usize {
        let now = SystemTime::now();
        self.tokens
            .iter()
            .map(|mut shard| {
                let before = shard.len();
                shard.retain(|expires_at| *expires_at > now);
                before - shard.len()
            })
            .sum()
    }
}

impl TokenStore for MemoryTokenStore {
    async fn issue(&self, scope: &Scope, ttl: Duration) -> Result<OneTimeToken, StoreError> {
        let token = OneTimeToken::generate(ttl)?;
        let key = OneTimeToken::storage_key(scope, &token.value);
        self.tokens.lock(&key).insert(key, token.expires_at);
        Ok(token)
    }

    async fn consume(&self, scope: &Scope, token: &str) -> Result<TokenOutcome, StoreError> {
        let key = OneTimeToken::storage_key(scope, token);
        let removed = self.tokens.lock(&key).remove(&key);
        Ok(match removed {
            Some(expires_at) if expires_at > SystemTime::now() => TokenOutcome::Consumed,
            _ => TokenOutcome::Invalid,
        })
    }
}
