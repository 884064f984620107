//! The shared conformance suite against the memory store.

use idempotency_core::{MemoryStore, MemoryTokenStore};

idempotency_core::store_conformance_tests!(async { Some(MemoryStore::new()) });
idempotency_core::token_conformance_tests!(async { Some(MemoryTokenStore::new()) });
