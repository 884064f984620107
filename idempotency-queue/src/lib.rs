//! Idempotent at-least-once queue consumers.
