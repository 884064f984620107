//! The `#[idempotent]` attribute macro.
