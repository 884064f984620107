//! Tower middleware that makes HTTP (and gRPC) endpoints idempotent.
