//! The scope of a layer's keys as the builder's type state: chosen deliberately (per principal
//! or shared by every caller) before the layer can be built.

/// The builder's state before the scope of keys is chosen: it has no `build`.
#[derive(Clone, Copy, Debug, Default)]
pub struct ScopeUnchosen;

/// The builder's state once the scope of keys is chosen: it can be built.
#[derive(Clone, Copy, Debug, Default)]
pub struct ScopeChosen;

/// Implemented by [`ScopeChosen`] only: a layer is built once its scope of keys is chosen.
#[diagnostic::on_unimplemented(
    message = "choose the scope of idempotency keys before building the layer",
    label = "no scope chosen yet",
    note = "per principal: `.principal_from_extension::<T>()` (the identity your authentication layer put in the request's extensions), `.principal(|parts| ..)` or `.principal_header(name)`",
    note = "one scope for every caller: `.shared_scope()` (a gateway's signed callbacks, with `.verify(..)`)"
)]
pub trait ScopeIsChosen: sealed::Sealed {}

impl ScopeIsChosen for ScopeChosen {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::ScopeChosen {}
}
