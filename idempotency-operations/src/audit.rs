//! The audit of operator actions: who did what to which record, why, when, and what the
//! record was.

use std::time::SystemTime;

use serde::Serialize;

use super::RecordView;
use crate::time::unix_millis;
use idempotency_core::{BoxFuture, StorageKey, StoreError};

/// The tracing target of audit entries written by [`TracingAudit`].
pub const AUDIT_TARGET: &str = "idempotency::audit";

/// What an operator did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Released an in-progress record, so that the next retry runs.
    Release,
    /// Completed an in-progress record by hand with an outcome.
    Complete,
    /// Deleted a record.
    Delete,
    /// Made an in-progress run resumable at once, its attempts counted anew (a run with steps
    /// the completer had left to operators).
    Resume,
    /// Purged expired records (one entry per purge run).
    Purge,
    /// Made a dead outbox message pending again (its id and table in the detail).
    Revive,
}

impl Action {
    /// `"release"`, `"complete"`, `"delete"`, `"resume"`, `"purge"` or `"revive"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Release => "release",
            Self::Complete => "complete",
            Self::Delete => "delete",
            Self::Resume => "resume",
            Self::Purge => "purge",
            Self::Revive => "revive",
        }
    }
}

/// Who acts, and why: every action carries both into the audit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Actor {
    /// Who (an operator's login, a service account).
    pub who: String,
    /// Why (a ticket, an incident, a sentence).
    pub why: String,
}

impl Actor {
    /// `who`, acting for `why`.
    pub fn new(who: impl Into<String>, why: impl Into<String>) -> Self {
        Self {
            who: who.into(),
            why: why.into(),
        }
    }
}

/// One audited action.
#[derive(Clone, Debug, Serialize)]
pub struct AuditEntry {
    /// When, Unix milliseconds.
    pub at_ms: u64,
    /// Who.
    pub actor: String,
    /// Why.
    pub reason: String,
    /// What.
    pub action: Action,
    /// The record's storage key (no raw key), if the action was on one record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_hash: Option<String>,
    /// The namespace acted in, if known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The record as it was before the action (no body).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub was: Option<RecordView>,
    /// Whether the action applied.
    pub applied: bool,
    /// What came of it: `applied`, the refusal (`moved_on`, …), or a purge's numbers.
    pub detail: String,
}

impl AuditEntry {
    /// An entry for `action` by `actor`, now.
    pub fn new(actor: &Actor, action: Action, applied: bool, detail: impl Into<String>) -> Self {
        Self {
            at_ms: unix_millis(SystemTime::now()),
            actor: actor.who.clone(),
            reason: actor.why.clone(),
            action,
            key_hash: None,
            namespace: None,
            was: None,
            applied,
            detail: detail.into(),
        }
    }

    /// The entry about the record of `key`, as it was.
    pub fn on(mut self, key: &StorageKey, was: Option<RecordView>) -> Self {
        self.key_hash = Some(key.to_hex());
        self.namespace = was.as_ref().map(|view| view.namespace.clone());
        self.was = was;
        self
    }

    /// The entry of an action in `namespace`.
    pub fn in_namespace(mut self, namespace: Option<&str>) -> Self {
        if let Some(namespace) = namespace {
            self.namespace = Some(namespace.to_owned());
        }
        self
    }

    /// The record as it was, as JSON (`null` if none).
    pub fn was_json(&self) -> String {
        serde_json::to_string(&self.was).unwrap_or_else(|_| "null".to_owned())
    }
}

/// Where audit entries go: a table in the store's database
/// (`idempotency_sql::SqlAudit`), or the log stream ([`TracingAudit`]). An action is
/// reported failed when its entry cannot be written (the action itself may have applied: the
/// error says so).
pub trait AuditLog: Send + Sync + 'static {
    /// Writes one entry.
    fn write<'a>(&'a self, entry: &'a AuditEntry) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The table this log writes to, if it is one in the database at `database` (a URL
    /// without its password), so that a store in that database writes an action and its entry
    /// in one transaction ([`Operations::act_audited`](super::Operations::act_audited)).
    /// `None`, the default: entries are written apart.
    fn table_in(&self, database: &str) -> Option<&str> {
        let _ = database;
        None
    }
}

/// Audit entries as `tracing` events of target [`AUDIT_TARGET`] at `INFO`, the entry as JSON
/// in the field `entry` (for the stores without a table of their own: memory, Redis). Route
/// that target to durable logs.
#[derive(Clone, Copy, Debug, Default)]
pub struct TracingAudit;

impl AuditLog for TracingAudit {
    fn write<'a>(&'a self, entry: &'a AuditEntry) -> BoxFuture<'a, Result<(), StoreError>> {
        let json = serde_json::to_string(entry)
            .map_err(|error| StoreError::Codec(error.to_string().into()));
        Box::pin(async move {
            let json = json?;
            tracing::info!(
                target: AUDIT_TARGET,
                action = entry.action.as_str(),
                actor = %entry.actor,
                applied = entry.applied,
                entry = %json,
                "operator action"
            );
            Ok(())
        })
    }
}
