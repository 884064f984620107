//! The idempotency middleware: [`IdempotencyLayer`], its builder, service and response future.
//!
//! A guarded request goes through `gate` (read what the key and fingerprint need, claim the
//! key through the engine, then replay, refuse or run) and, when it runs, through `execute`
//! (the handler inline, to its end, then complete or release; moved to a task of its own if the
//! request is dropped before that end).

mod builder;
mod execute;
mod future;
mod gate;
mod layer;
mod service;
mod settings;
#[cfg(test)]
mod sizes;

pub use builder::IdempotencyLayerBuilder;
pub use future::ResponseFuture;
pub use layer::IdempotencyLayer;
pub use service::IdempotencyService;
pub use settings::{
    DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_STORED_BYTES, DEFAULT_MAX_STORED_HEADER_BYTES,
    DEFAULT_MAX_STORED_HEADERS, PrincipalFn,
};
