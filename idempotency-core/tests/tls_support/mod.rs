//! The TLS side of `tls.rs`: a throw-away CA, a TLS-only `redis-server` and a TLS-terminating
//! proxy in front of PostgreSQL.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    unreachable_pub,
    dead_code
)]

#[cfg(feature = "postgres")]
pub mod pg_proxy;
pub mod pki;
#[cfg(feature = "redis")]
pub mod redis_server;

/// A loopback port free right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
