//! A layer's configuration, as the builder records it and every service of the layer reads it:
//! the [`Settings`], the choices presets keep, the scope's type state, the guarded paths and
//! their check, what is prepared when the layer is built.
//!
//! Shared by both layers (the transactional one takes the same settings), the middleware they
//! wrap services in and its helpers; it imports none of them.

#[cfg(feature = "grpc-descriptor")]
mod descriptor;
mod explicit;
mod guarded_paths;
mod prepare;
mod scope;
mod settings;

#[cfg(feature = "grpc-descriptor")]
pub(crate) use descriptor::GrpcMethods;
pub(crate) use explicit::Choice;
pub(crate) use prepare::warn_if_shared_unverified;
pub use scope::{ScopeChosen, ScopeIsChosen, ScopeUnchosen};
pub use settings::{
    DEFAULT_BODY_READ_TIMEOUT, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_DETACHED,
    DEFAULT_MAX_STORED_BYTES, DEFAULT_MAX_STORED_HEADER_BYTES, DEFAULT_MAX_STORED_HEADERS,
    PrincipalFn, VerifyFn,
};
pub(crate) use settings::{PrincipalSource, Settings};
