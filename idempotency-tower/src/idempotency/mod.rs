//! The idempotency middleware: [`IdempotencyLayer`], its builder, service and response future.
//!
//! Laid out as tower's middleware are: `layer` (the layer and what its services share),
//! `service` (the service it wraps a handler in: the crate's guarded service, with this layer's
//! guard) and the response future, the guarded service's. `builder` configures the layer and
//! `config` holds what it is configured with. A guarded request goes through the guarded
//! service (is it guarded; its key header), `gate` (read what the key, fingerprint and
//! verification need, claim the key through the engine, then replay, refuse or run) and, when
//! it runs, through `execute` (the handler inline, to its end, then complete or release; moved
//! to a task of its own if the request is dropped before that end).

mod builder;
pub(crate) mod config;
mod conflict;
mod execute;
mod gate;
mod layer;
mod service;
#[cfg(test)]
mod sizes;

pub use builder::IdempotencyLayerBuilder;
pub use config::{
    DEFAULT_BODY_READ_TIMEOUT, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_DETACHED,
    DEFAULT_MAX_STORED_BYTES, DEFAULT_MAX_STORED_HEADER_BYTES, DEFAULT_MAX_STORED_HEADERS,
    PrincipalFn, ScopeChosen, ScopeIsChosen, ScopeUnchosen, VerifyFn,
};
pub use layer::IdempotencyLayer;
pub use service::IdempotencyService;
