//! Namespaces prepared once, with their metric keys, and borrowed per claim.

use std::sync::Arc;

use crate::Mechanism;
use crate::derivation::Origin;
use crate::metrics::{DecisionLabel, NamespaceCounters, StoreOp, adhoc};

/// A namespace prepared once for the engine: its name and its metric keys, built when it is
/// created rather than on every request. Cheap to clone (one reference count).
///
/// A front end keeps one per namespace it serves and claims with [`Idempotency::claim`](crate::Idempotency::claim);
/// [`Idempotency::begin`](crate::Idempotency::begin) takes the namespace from a [`Scope`](crate::Scope) and counts the same metrics.
#[derive(Clone)]
pub struct Namespace(NamespaceRepr);

#[derive(Clone)]
pub(super) enum NamespaceRepr {
    /// Built by [`Namespace::new`]: counters ready.
    Prepared(Arc<PreparedNamespace>),
    /// Taken from a `&str` for one execution: counters built per event.
    Adhoc(Arc<str>),
}

pub(super) struct PreparedNamespace {
    pub(super) name: Box<str>,
    pub(super) counters: NamespaceCounters,
    /// The front end claiming in it, kept with the records it writes.
    pub(super) mechanism: Mechanism,
}

impl Namespace {
    /// Prepares `name` for requests (HTTP, gRPC, direct engine calls:
    /// [`Mechanism::Request`](crate::Mechanism::Request), whose keys [`Scope::storage_key`](crate::Scope::storage_key) derives).
    pub fn new(name: &str) -> Self {
        Self::for_mechanism(Mechanism::Request, name)
    }

    /// Prepares `name` for the front end of `mechanism`: the records it writes say so
    /// ([`Record::mechanism`](crate::Record::mechanism)).
    pub fn for_mechanism(mechanism: Mechanism, name: &str) -> Self {
        Self(NamespaceRepr::Prepared(Arc::new(PreparedNamespace {
            name: name.into(),
            counters: NamespaceCounters::new(name),
            mechanism,
        })))
    }

    /// The front end it was prepared for ([`Namespace::for_mechanism`]).
    pub fn mechanism(&self) -> Mechanism {
        match &self.0 {
            NamespaceRepr::Prepared(prepared) => prepared.mechanism,
            NamespaceRepr::Adhoc(_) => Mechanism::Request,
        }
    }

    /// The namespace's name.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            NamespaceRepr::Prepared(prepared) => &prepared.name,
            NamespaceRepr::Adhoc(name) => name,
        }
    }

    pub(super) fn by_ref(&self) -> NamespaceRef<'_> {
        match &self.0 {
            NamespaceRepr::Prepared(prepared) => {
                NamespaceRef::Prepared(self, prepared, Origin::current(Some(prepared.mechanism)))
            }
            NamespaceRepr::Adhoc(name) => NamespaceRef::Name(name, Origin::current(None)),
        }
    }
}

impl std::fmt::Debug for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Namespace").field(&self.as_str()).finish()
    }
}

impl std::fmt::Display for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A namespace as one call sees it: prepared, or a name only; with the origin of the keys
/// it claims (kept with the records they write).
#[derive(Clone, Copy)]
pub(super) enum NamespaceRef<'a> {
    Prepared(&'a Namespace, &'a PreparedNamespace, Origin),
    Name(&'a str, Origin),
}

impl<'a> NamespaceRef<'a> {
    pub(super) fn as_str(self) -> &'a str {
        match self {
            Self::Prepared(_, prepared, _) => &prepared.name,
            Self::Name(name, _) => name,
        }
    }

    pub(super) fn origin(self) -> Origin {
        match self {
            Self::Prepared(_, _, origin) | Self::Name(_, origin) => origin,
        }
    }

    /// The same namespace, claiming keys of `origin`.
    pub(super) fn with_origin(self, origin: Origin) -> Self {
        match self {
            Self::Prepared(namespace, prepared, _) => Self::Prepared(namespace, prepared, origin),
            Self::Name(name, _) => Self::Name(name, origin),
        }
    }

    pub(super) fn to_owned(self) -> Namespace {
        match self {
            Self::Prepared(namespace, _, _) => namespace.clone(),
            Self::Name(name, _) => Namespace(NamespaceRepr::Adhoc(Arc::from(name))),
        }
    }

    pub(super) fn count_decision(self, decision: DecisionLabel) {
        match self {
            Self::Prepared(_, prepared, _) => prepared.counters.decision(decision),
            Self::Name(name, _) => adhoc::decision(name, decision),
        }
    }

    pub(super) fn count_released(self) {
        match self {
            Self::Prepared(_, prepared, _) => prepared.counters.released(),
            Self::Name(name, _) => adhoc::released(name),
        }
    }

    pub(super) fn count_store_error(self, op: StoreOp) {
        match self {
            Self::Prepared(_, prepared, _) => prepared.counters.store_error(op),
            Self::Name(name, _) => adhoc::store_error(name, op),
        }
    }

    pub(super) fn count_stale_owner(self, op: StoreOp) {
        match self {
            Self::Prepared(_, prepared, _) => prepared.counters.stale_owner(op),
            Self::Name(name, _) => adhoc::stale_owner(name, op),
        }
    }
}
