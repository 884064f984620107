//! The conflict mark of a Redis record ([`Store::mark_conflict`](idempotency_core::Store::mark_conflict)):
//! one script, one round trip.

use std::time::SystemTime;

use ::redis::aio::ConnectionLike;

use super::store::RedisStore;
use crate::time::unix_millis;
use idempotency_core::{StorageKey, StoreError};

impl<C> RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Counts one more conflict on the record of `key`; whether there was one.
    pub(super) async fn mark_conflict_op(&self, key: &StorageKey) -> Result<bool, StoreError> {
        let now = unix_millis(SystemTime::now()).to_be_bytes();
        let mut invocation = self.scripts.mark_conflict.prepare_invoke();
        invocation.key(self.record_key(key)).arg(&now[..]);
        // A lease of this process whose record is marked is completed by the script, which
        // keeps the mark: the bytes held for a native compare-and-set are not the record's.
        self.held.forget(key);
        let marked: i64 = self.invoke(&invocation).await?;
        Ok(marked == 1)
    }
}
