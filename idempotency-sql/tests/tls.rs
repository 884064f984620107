//! TLS to PostgreSQL (feature `tls`), against the real server with a CA made by the test:
//! through a TLS-terminating proxy (`tls_support::pg_proxy`) in front of `DATABASE_URL`
//! (default `postgres://postgres@127.0.0.1:5432/test`), with `sslmode=verify-full` and the test
//! CA; migrate and part of the conformance suite. The proxy counts the handshakes, refuses
//! `sslmode=disable`, and a client that does not trust the CA fails its handshake.
//!
//! MySQL is not covered: its TLS upgrade happens inside the handshake packets, which a byte
//! proxy cannot terminate, and the shared MariaDB has TLS disabled.
#![cfg(all(feature = "tls", feature = "postgres"))]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod tls_support;

use idempotency_test::pki::Pki;

#[cfg(feature = "postgres")]
mod postgres {
    use std::str::FromStr;
    use std::sync::Arc;
    use std::time::Duration;

    use idempotency_sql::PostgresStore;
    use idempotency_test::{self as testing, unavailable, unique_key};
    use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions, PgSslMode};
    use sqlx::{ConnectOptions, Connection, PgPool};

    use super::Pki;
    use crate::tls_support::pg_proxy::PgTlsProxy;

    fn url() -> String {
        std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
    }

    /// A proxy in front of the server of `DATABASE_URL`, and that URL's options pointed at the
    /// proxy; `None` (printed, or a panic under `CI=true`) when the server is unreachable.
    async fn proxied(pki: &Pki) -> Option<(PgTlsProxy, PgConnectOptions)> {
        let direct = PgConnectOptions::from_str(&url()).unwrap();
        if let Err(error) = PgConnection::connect_with(&direct).await {
            return unavailable("PostgreSQL", error);
        }
        let upstream = format!("{}:{}", direct.get_host(), direct.get_port());
        let proxy = PgTlsProxy::start(pki, upstream).await;
        let options = direct.host("127.0.0.1").port(proxy.port);
        Some((proxy, options))
    }

    /// `options` requiring TLS with a verified certificate for `127.0.0.1`, trusting `root_pem`.
    fn verify_full(options: &PgConnectOptions, root_pem: &str) -> PgConnectOptions {
        options
            .clone()
            .ssl_mode(PgSslMode::VerifyFull)
            .ssl_root_cert_from_pem(root_pem.as_bytes().to_vec())
    }

    async fn drop_table(pool: &PgPool, table: &str) {
        sqlx::raw_sql(&format!(
            "DROP TABLE IF EXISTS {table}; DROP SEQUENCE IF EXISTS {table}_token_seq"
        ))
        .execute(pool)
        .await
        .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn postgres_store_over_tls_passes_the_conformance_checks() {
        let pki = Pki::generate();
        let Some((proxy, options)) = proxied(&pki).await else {
            return;
        };
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(verify_full(&options, &pki.ca_pem))
            .await
            .unwrap();
        let table = format!("idem_tls_{}", &unique_key().to_hex()[..12]);
        let store = PostgresStore::new(pool.clone())
            .with_table_name(&table)
            .unwrap();
        store.migrate().await.unwrap();
        testing::lifecycle(&store).await;
        testing::mismatch(&store).await;
        testing::takeover_and_fencing(&store).await;
        testing::release_and_reclaim(&store).await;
        testing::unknown_key_is_refused(&store).await;
        testing::claim_storm(Arc::new(store)).await;

        // Every connection of the pool came through a completed handshake, none in the clear.
        assert!(
            proxy.handshakes() >= 1,
            "no TLS handshake reached the proxy"
        );
        assert!(proxy.handshakes() >= pool.size() as usize);
        assert_eq!(proxy.refused_plain(), 0);
        drop_table(&pool, &table).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn postgres_tls_refuses_plain_and_untrusting_clients() {
        let pki = Pki::generate();
        let Some((proxy, options)) = proxied(&pki).await else {
            return;
        };

        // The URL form users put in their configuration: verify-full, the CA as a file.
        let dir =
            std::env::temp_dir().join(format!("idempotency-tls-{}", &unique_key().to_hex()[..12]));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, &pki.ca_pem).unwrap();
        let url = format!(
            "postgres://{}@127.0.0.1:{}/{}?sslmode=verify-full&sslrootcert={}",
            options.get_username(),
            proxy.port,
            options.get_database().unwrap_or("postgres"),
            ca.display()
        );
        let mut connection = PgConnection::connect(&url).await.unwrap();
        let one: i32 = sqlx::query_scalar("SELECT 1")
            .fetch_one(&mut connection)
            .await
            .unwrap();
        assert_eq!(one, 1);
        connection.close().await.unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(proxy.handshakes(), 1);

        // A client that does not ask for TLS is refused before it can authenticate,
        let plain = options.clone().ssl_mode(PgSslMode::Disable).connect().await;
        assert!(plain.is_err(), "a plain client got through the TLS proxy");
        assert_eq!(proxy.refused_plain(), 1);

        // and one that trusts only the public roots, or another CA, fails its handshake.
        let untrusted = options
            .clone()
            .ssl_mode(PgSslMode::VerifyFull)
            .connect()
            .await;
        let error = untrusted
            .expect_err("a client without the CA was let in")
            .to_string();
        assert!(
            error.contains("certificate"),
            "not refused for its certificate: {error}"
        );
        let other = Pki::generate();
        let stranger = verify_full(&options, &other.ca_pem).connect().await;
        let error = stranger
            .expect_err("a client trusting another CA was let in")
            .to_string();
        assert!(
            error.contains("certificate"),
            "not refused for its certificate: {error}"
        );
        assert_eq!(
            proxy.handshakes(),
            1,
            "a handshake completed with an untrusting client"
        );
    }
}
