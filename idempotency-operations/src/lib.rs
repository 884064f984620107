//! Operations on idempotency records: find and resolve dangling records, reconcile, purge with
//! an archive.
//!
//! A crash between a claim and its completion leaves an **abandoned** record: in progress,
//! its lease ended ([`Status::Abandoned`]). The next claim of its key takes it over, but until
//! a retry comes every duplicate waits on it, and finance may ask whether it was processed.
//! This module lets an operator see such records and decide about them, on every store:
//!
//! - [`Operations`]: what a store brings, implemented by the memory store (here), `RedisStore` (one
//!   node: `SCAN`; Cluster: `SCAN` on every master in turn) and the SQL stores (pages by
//!   storage key): a scan in bounded batches, a delete fenced by the fencing token, and a
//!   purge of one batch with its [`Archive`].
//! - [`Admin`]: the operations themselves over any such store: list and count by [`Query`]
//!   (namespace, [`Status`], last update, attempts, conflicts: the records a conflicting
//!   duplicate met, [`Store::mark_conflict`](idempotency_core::Store::mark_conflict)), inspect one record, reconcile a list of
//!   keys, and the operator's actions, each **fenced** ([`Fence`]: applied only to the record
//!   as it was listed, refused when it moved on) and **audited** ([`AuditLog`]: who, why,
//!   when, the record as it was): release, complete by hand, delete, purge.
//!
//! Records are shown as [`RecordView`]s: storage keys (digests), never raw keys, and a stored
//! body only when one record is asked for by its key. A raw key becomes a storage key exactly
//! as the service derived it: by its [`Scope`](idempotency_core::Scope) (namespace, principal) and
//! [`Mechanism`](idempotency_core::Mechanism) ([`Admin::storage_key`]).
//!
//! ```
//! use idempotency_operations::{Actor, Admin, Fence, Query, Step, TracingAudit};
//! use idempotency_core::{Fingerprint, Idempotency, IdempotencyKey, InFlightPolicy, MemoryStore, Mechanism, Scope};
//! use std::sync::Arc;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), idempotency_core::Error> {
//! let store = Arc::new(MemoryStore::new());
//! let admin = Admin::new(Arc::clone(&store), TracingAudit);
//! let key = Admin::storage_key(&Scope::new("payments.callback"), Mechanism::Request, "T1");
//! // ... a record of "T1" dangles after a crash ...
//! # let engine = Idempotency::new(Arc::clone(&store));
//! # let scope = Scope::new("payments.callback");
//! # let _claimed = engine.claim(&scope, &IdempotencyKey::parse("T1")?, &Fingerprint::of_bytes(b"x"), InFlightPolicy::Reject).await?;
//! let stuck = admin.list(&Query::stuck(Some(std::time::Duration::ZERO)), 100, &mut |_| {}).await?;
//! for record in &stuck {
//!     let acted = admin.act(&record.key, Fence::of(record), &Actor::new("ops", "INC-42"), Step::Release).await?;
//!     assert!(acted.applied());
//! }
//! assert!(admin.inspect(&key).await?.is_none());
//! # Ok(()) }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

mod admin;
mod archive;
mod audit;
mod contract;
mod cursor;
mod fence;
mod memory;
mod query;
mod reconciliation;
mod status;
mod tiers;
mod time;
mod view;

pub use admin::{Admin, Progress, PurgeReport};
pub use archive::{Archive, Purged, purgeable};
pub use audit::{AUDIT_TARGET, Action, Actor, AuditEntry, AuditLog, TracingAudit};
pub use contract::{AuditedStep, DEFAULT_BATCH, Operations, PageRequest, PurgeRequest, Step};
pub use cursor::{Cursor, Page};
pub use fence::{Acted, Fence, FenceRefusal};
pub use query::Query;
pub use reconciliation::Reconciliation;
pub use status::Status;
pub use tiers::{Tier, TieredStuck};
pub use view::{Counts, RecordView};
