//! What the admin API's requests carry: targets, fences, filters, the operator.

use std::time::{Duration, SystemTime};

use idempotency_core::{FencingToken, Mechanism, Record, Scope, StorageKey};
use idempotency_operations::{Actor, Admin, Fence, Query, Status};
use serde::Deserialize;

use super::error::ApiError;

/// Who acts, as the service's authentication established it: an outer auth layer inserts it
/// as a request extension in front of the admin router (or the router's verifier finds it,
/// [`admin_router_verified`](super::admin_router_verified)). The router answers nobody
/// without one, and audits it as who acted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operator(pub String);

/// One record: by namespace (+ principal, mechanism) and raw key, or by storage key.
#[derive(Debug, Deserialize)]
pub(super) struct Target {
    namespace: Option<String>,
    principal: Option<String>,
    mechanism: Option<String>,
    key: Option<String>,
    key_hash: Option<String>,
}

/// The scope of a namespace and optional principal.
pub(super) fn scope(namespace: Option<&str>, principal: Option<&str>) -> Result<Scope, ApiError> {
    let namespace = namespace.ok_or_else(|| ApiError::bad("namespace is required"))?;
    let scope = Scope::new(namespace);
    Ok(match principal {
        Some(principal) => scope.with_principal(principal),
        None => scope,
    })
}

/// The mechanisms named: the one given, or every one (a raw key is then looked for under
/// every front end's key derivation).
pub(super) fn mechanisms(name: Option<&str>) -> Result<Vec<Mechanism>, ApiError> {
    let Some(name) = name else {
        return Ok(Mechanism::ALL.to_vec());
    };
    Mechanism::parse(name).map(|one| vec![one]).ok_or_else(|| {
        ApiError::bad(format!(
            "mechanism {name:?}: one of request, function, transaction, message (or none: \
             every one)"
        ))
    })
}

/// The records of the raw `key` in `scope` under each of `mechanisms`, with their storage
/// keys; every candidate read.
pub(super) async fn candidates(
    admin: &Admin,
    scope: &Scope,
    mechanisms: &[Mechanism],
    key: &str,
) -> Result<Vec<(Mechanism, StorageKey, Option<Record>)>, ApiError> {
    let keys: Vec<StorageKey> = mechanisms
        .iter()
        .map(|mechanism| Admin::storage_key(scope, *mechanism, key))
        .collect();
    let records = admin.reconcile(&keys).await?;
    Ok(mechanisms
        .iter()
        .zip(keys)
        .zip(records)
        .map(|((mechanism, key), record)| (*mechanism, key, record))
        .collect())
}

impl Target {
    /// The storage key named: `key_hash`, or the raw key under `mechanism`; without one,
    /// under whichever front end holds a record of it (the first candidate's key when none
    /// does). A key with records of several front ends is refused (400) with each one's
    /// `key_hash`, to name one by.
    pub(super) async fn storage_key(&self, admin: &Admin) -> Result<StorageKey, ApiError> {
        if let Some(hex) = &self.key_hash {
            return StorageKey::from_hex(hex)
                .ok_or_else(|| ApiError::bad("key_hash is not 64 hex characters"));
        }
        let key = self
            .key
            .as_deref()
            .ok_or_else(|| ApiError::bad("key or key_hash is required"))?;
        let scope = scope(self.namespace.as_deref(), self.principal.as_deref())?;
        let mechanisms = mechanisms(self.mechanism.as_deref())?;
        let found = candidates(admin, &scope, &mechanisms, key).await?;
        let held: Vec<_> = found
            .iter()
            .filter(|(.., record)| record.is_some())
            .collect();
        match held.as_slice() {
            [] => Ok(found
                .first()
                .map(|(_, key, _)| *key)
                .unwrap_or_else(|| Admin::storage_key(&scope, Mechanism::Request, key))),
            [(_, key, _)] => Ok(*key),
            several => Err(ApiError::bad(format!(
                "key has records of several front ends: {}; name one by key_hash",
                several
                    .iter()
                    .map(|(mechanism, key, _)| format!("{} (key_hash {key})", mechanism.as_str()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }
}

/// The record as listed: its token and last write.
#[derive(Debug, Deserialize)]
pub(super) struct FenceBody {
    token: u64,
    updated_at_ms: u64,
}

impl FenceBody {
    pub(super) fn fence(&self) -> Fence {
        Fence {
            token: FencingToken::new(self.token),
            updated_at: SystemTime::UNIX_EPOCH + Duration::from_millis(self.updated_at_ms),
        }
    }
}

/// Who acts and why: the authenticated [`Operator`] only. A body naming an `actor` is refused,
/// so that nobody believes it is audited.
pub(super) fn actor(
    operator: &Operator,
    actor: Option<&str>,
    reason: &str,
) -> Result<Actor, ApiError> {
    if actor.is_some() {
        return Err(ApiError::bad(
            "actor: who acts is the authenticated operator, never a field of the request",
        ));
    }
    Ok(Actor::new(operator.0.clone(), reason))
}

/// Filters of the listing endpoints, from the query string.
#[derive(Debug, Default, Deserialize)]
pub(super) struct Filter {
    pub(super) namespace: Option<String>,
    pub(super) state: Option<String>,
    pub(super) since_ms: Option<u64>,
    pub(super) older_than_ms: Option<u64>,
    pub(super) min_attempts: Option<u32>,
    pub(super) min_conflicts: Option<u32>,
    pub(super) limit: Option<usize>,
    pub(super) cursor: Option<String>,
}

impl Filter {
    /// The query these filters make.
    pub(super) fn query(&self) -> Result<Query, ApiError> {
        let now = SystemTime::now();
        let mut query = Query::all();
        query.namespace = self.namespace.clone();
        if let Some(state) = &self.state {
            let status = Status::parse(state).ok_or_else(|| {
                ApiError::bad(format!(
                    "state {state:?}: in_progress, abandoned or completed"
                ))
            })?;
            query = query.status(status);
        }
        query.updated_from = self.since_ms.map(|ms| now - Duration::from_millis(ms));
        query.updated_before = self.older_than_ms.map(|ms| now - Duration::from_millis(ms));
        query.min_attempts = self.min_attempts;
        query.min_conflicts = self.min_conflicts;
        Ok(query)
    }
}
