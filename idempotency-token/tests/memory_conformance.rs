//! The shared token conformance suite against the memory token store.

use idempotency_token::MemoryTokenStore;

idempotency_test::token_conformance_tests!(async { Some(MemoryTokenStore::new()) });
