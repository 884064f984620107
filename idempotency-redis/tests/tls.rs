//! TLS to the stores (feature `tls`), against real servers with a CA made by the test:
//!
//! - Redis: a private `redis-server` that listens for TLS only; the store connects with
//!   `rediss://` and the test CA as its root, and passes part of the conformance suite. A plain
//!   `redis://` client and a client that does not trust the CA are refused by the same server.
//!
//! The SQL stores' TLS is tested in `idempotency-sql`.
#![cfg(feature = "tls")]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod tls_support;

use idempotency_test::pki::Pki;

mod redis {
    use std::sync::Arc;

    use idempotency_redis::driver::{Client, TlsCertificates};
    use idempotency_redis::{RedisStore, RedisTokenStore};
    use idempotency_test as testing;

    use super::Pki;
    use crate::tls_support::redis_server::TlsRedis;

    /// A client for `url` that trusts `root_pem` (and nothing else).
    fn client_trusting(url: &str, root_pem: &str) -> Client {
        let certificates = TlsCertificates {
            client_tls: None,
            root_cert: Some(root_pem.as_bytes().to_vec()),
        };
        Client::build_with_tls(url, certificates).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn redis_store_over_tls_passes_the_conformance_checks() {
        let pki = Pki::generate();
        let Some(server) = TlsRedis::start(&pki).await else {
            return;
        };
        let store = RedisStore::from_client(client_trusting(&server.url(), &pki.ca_pem))
            .await
            .unwrap();
        testing::lifecycle(&store).await;
        testing::mismatch(&store).await;
        testing::takeover_and_fencing(&store).await;
        testing::release_and_reclaim(&store).await;
        testing::unknown_key_is_refused(&store).await;
        testing::claim_storm(Arc::new(store)).await;

        let tokens = RedisTokenStore::from_client(client_trusting(&server.url(), &pki.ca_pem))
            .await
            .unwrap();
        testing::tokens(Arc::new(tokens)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn redis_tls_port_refuses_plain_and_untrusting_clients() {
        let pki = Pki::generate();
        let Some(server) = TlsRedis::start(&pki).await else {
            return;
        };
        // The server answers a client that trusts the CA...
        let trusted = RedisStore::from_client(client_trusting(&server.url(), &pki.ca_pem)).await;
        assert!(trusted.is_ok(), "over TLS with the CA: {:?}", trusted.err());

        // ...but not one that speaks plain RESP to its port,
        let plain = RedisStore::connect(&format!("redis://127.0.0.1:{}", server.port)).await;
        assert!(plain.is_err(), "a plain client reached a TLS-only port");

        // nor one that trusts only the public roots (`rediss://` without our CA),
        let untrusted = RedisStore::connect(&server.url()).await;
        let error = untrusted
            .expect_err("a client without the CA was let in")
            .to_string();
        assert!(
            error.contains("certificate"),
            "not refused for its certificate: {error}"
        );

        // nor one that trusts another CA.
        let other = Pki::generate();
        let stranger = RedisStore::from_client(client_trusting(&server.url(), &other.ca_pem)).await;
        let error = stranger
            .expect_err("a client trusting another CA was let in")
            .to_string();
        assert!(
            error.contains("certificate"),
            "not refused for its certificate: {error}"
        );
    }
}
