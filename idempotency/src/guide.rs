//! The guide: how each source of duplicates is made harmless, and what happens when things fail.
//!
//! Read in this order: [`http`] (the layer, and what a client sees), [`functions`]
//! (`#[idempotent]`), [`iron_rule`] (the record in the business transaction), [`steps`]
//! (handlers with several steps, retried to completion), [`consumers`]
//! (queues, two tiers), [`outbox`] (across services), [`stores`], [`store_failures`],
//! [`operations`] (dangling records, reconciliation, purge), [`pitfalls`], [`examples`]. The defaults are
//! one table in the [README](https://example.invalid/idempotency#defaults-in-one-table).

#[doc = include_str!("../docs/http.md")]
pub mod http {}

#[doc = include_str!("../docs/functions.md")]
pub mod functions {}

#[doc = include_str!("../docs/iron_rule.md")]
pub mod iron_rule {}

#[doc = include_str!("../docs/steps.md")]
pub mod steps {}

#[doc = include_str!("../docs/consumers.md")]
pub mod consumers {}

#[doc = include_str!("../docs/outbox.md")]
pub mod outbox {}

#[doc = include_str!("../docs/stores.md")]
pub mod stores {}

#[doc = include_str!("../docs/store_failures.md")]
pub mod store_failures {}

#[doc = include_str!("../docs/operations.md")]
pub mod operations {}

#[doc = include_str!("../docs/pitfalls.md")]
pub mod pitfalls {}

#[doc = include_str!("../docs/examples.md")]
pub mod examples {}
