//! The idempotency middleware: [`IdempotencyLayer`], its builder, service and response future.
//!
//! A guarded request goes through `service` (is it guarded; its key header), `gate` (read what
//! the key, fingerprint and verification need, claim the key through the engine, then replay,
//! refuse or run) and, when it runs, through `execute` (the handler inline, to its end, then
//! complete or release; moved to a task of its own if the request is dropped before that end).

mod builder;
mod conflict;
#[cfg(feature = "grpc-descriptor")]
mod descriptor;
mod execute;
mod explicit;
mod gate;
mod guarded_paths;
mod layer;
#[cfg(test)]
mod preset_order;
mod scoping;
mod service;
mod settings;
#[cfg(test)]
mod sizes;

pub use builder::IdempotencyLayerBuilder;
pub use layer::IdempotencyLayer;
#[cfg(feature = "sql")]
pub(crate) use scoping::warn_if_shared_unverified;
pub use scoping::{ScopeChosen, ScopeIsChosen, ScopeUnchosen};
pub use service::IdempotencyService;
pub(crate) use settings::Settings;
pub use settings::{
    DEFAULT_BODY_READ_TIMEOUT, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_DETACHED,
    DEFAULT_MAX_STORED_BYTES, DEFAULT_MAX_STORED_HEADER_BYTES, DEFAULT_MAX_STORED_HEADERS,
    PrincipalFn, VerifyFn,
};
