//! One-time tokens kept in memory.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use idempotency_core::{Scope, StorageKey, StoreError};

use crate::token::{OneTimeToken, TokenOutcome, TokenStore};

/// Locks split by key, so that concurrent submits rarely wait for each other.
const SHARDS: usize = 16;

/// In-process one-time tokens (see [`TokenStore`]).
///
/// ```
/// use idempotency_core::Scope;
/// use idempotency_token::{MemoryTokenStore, TokenOutcome, TokenStore};
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
    /// Each token's expiry, under its storage key (the raw token is never kept).
    shards: Box<[Mutex<HashMap<StorageKey, SystemTime>>]>,
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
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }

    /// Deletes expired tokens; returns how many went.
    pub fn purge_expired(&self) -> usize {
        let now = SystemTime::now();
        self.shards
            .iter()
            .map(|shard| {
                let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
                let before = shard.len();
                shard.retain(|_, expires_at| *expires_at > now);
                before - shard.len()
            })
            .sum()
    }

    /// The shard of `key`, locked: the top bits of [`StorageKey::spread`].
    fn shard(&self, key: &StorageKey) -> MutexGuard<'_, HashMap<StorageKey, SystemTime>> {
        let index = (key.spread() >> 60) as usize % SHARDS;
        self.shards[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl TokenStore for MemoryTokenStore {
    async fn issue(&self, scope: &Scope, ttl: Duration) -> Result<OneTimeToken, StoreError> {
        let token = OneTimeToken::generate(ttl)?;
        let key = OneTimeToken::storage_key(scope, &token.value);
        self.shard(&key).insert(key, token.expires_at);
        Ok(token)
    }

    async fn consume(&self, scope: &Scope, token: &str) -> Result<TokenOutcome, StoreError> {
        let key = OneTimeToken::storage_key(scope, token);
        let removed = self.shard(&key).remove(&key);
        Ok(match removed {
            Some(expires_at) if expires_at > SystemTime::now() => TokenOutcome::Consumed,
            _ => TokenOutcome::Invalid,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn purge_removes_only_expired_tokens() {
        let tokens = MemoryTokenStore::new();
        let scope = Scope::new("checkout");
        let mut kept = Vec::new();
        for _ in 0..40 {
            kept.push(tokens.issue(&scope, Duration::from_secs(60)).await.unwrap());
            tokens.issue(&scope, Duration::ZERO).await.unwrap();
        }
        assert_eq!(tokens.purge_expired(), 40);
        assert_eq!(tokens.purge_expired(), 0);
        for token in kept {
            assert_eq!(
                tokens.consume(&scope, &token.value).await.unwrap(),
                TokenOutcome::Consumed
            );
        }
    }
}
