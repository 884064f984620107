//! The TLS side of `tls.rs`: a throw-away CA and a TLS-terminating proxy in front of
//! PostgreSQL.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    unreachable_pub,
    dead_code
)]

pub mod pg_proxy;
