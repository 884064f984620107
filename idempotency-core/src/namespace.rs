//! Namespaces prepared once, with their metric keys, and borrowed per claim.

use std::sync::Arc;

use crate::Mechanism;
use crate::derivation::Origin;
use crate::metrics::{DecisionLabel, NamespaceCounters, StoreOp, adhoc};

/// A namespace prepared once for the engine: its name and its metric keys, built when it is
/// created rather than on every request. Cheap to clone (one reference count).
///
/// A front end keeps one per namespace it serves and claims in its scopes ([`Namespace::scope`]);
/// a [`Scope::new`](crate::Scope::new) names its namespace for itself and counts the same metrics, building their
/// keys per event.
#[derive(Clone)]
pub struct Namespace(NamespaceRepr);

#[derive(Clone)]
pub(crate) enum NamespaceRepr {
    /// Built by [`Namespace::new`]: counters ready.
    Prepared(Arc<PreparedNamespace>),
    /// Named by a [`Scope`](crate::Scope) of its own: counters built per event.
    Adhoc(Arc<str>, Mechanism),
}

pub(crate) struct PreparedNamespace {
    pub(crate) name: Box<str>,
    pub(crate) counters: NamespaceCounters,
    /// The front end claiming in it, kept with the records it writes.
    pub(crate) mechanism: Mechanism,
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

    /// A namespace named for one scope ([`Scope::for_mechanism`](crate::Scope::for_mechanism)).
    pub(crate) fn named(mechanism: Mechanism, name: String) -> Self {
        Self(NamespaceRepr::Adhoc(name.into(), mechanism))
    }

    /// The front end it was prepared for ([`Namespace::for_mechanism`]).
    pub fn mechanism(&self) -> Mechanism {
        match &self.0 {
            NamespaceRepr::Prepared(prepared) => prepared.mechanism,
            NamespaceRepr::Adhoc(_, mechanism) => *mechanism,
        }
    }

    /// The namespace's name.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            NamespaceRepr::Prepared(prepared) => &prepared.name,
            NamespaceRepr::Adhoc(name, _) => name,
        }
    }

    pub(crate) fn by_ref(&self) -> NamespaceRef<'_> {
        match &self.0 {
            NamespaceRepr::Prepared(prepared) => {
                NamespaceRef::Prepared(self, prepared, Origin::current(Some(prepared.mechanism)))
            }
            NamespaceRepr::Adhoc(name, mechanism) => {
                NamespaceRef::Name(name, Origin::current(Some(*mechanism)))
            }
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
pub(crate) enum NamespaceRef<'a> {
    Prepared(&'a Namespace, &'a PreparedNamespace, Origin),
    Name(&'a str, Origin),
}

impl<'a> NamespaceRef<'a> {
    pub(crate) fn as_str(self) -> &'a str {
        match self {
            Self::Prepared(_, prepared, _) => &prepared.name,
            Self::Name(name, _) => name,
        }
    }

    pub(crate) fn origin(self) -> Origin {
        match self {
            Self::Prepared(_, _, origin) | Self::Name(_, origin) => origin,
        }
    }

    /// The same namespace, claiming keys of `origin`.
    pub(crate) fn with_origin(self, origin: Origin) -> Self {
        match self {
            Self::Prepared(namespace, prepared, _) => Self::Prepared(namespace, prepared, origin),
            Self::Name(name, _) => Self::Name(name, origin),
        }
    }

    pub(crate) fn to_owned(self) -> Namespace {
        match self {
            Self::Prepared(namespace, _, _) => namespace.clone(),
            Self::Name(name, origin) => Namespace(NamespaceRepr::Adhoc(
                Arc::from(name),
                origin.mechanism.unwrap_or(Mechanism::Request),
            )),
        }
    }

    pub(crate) fn count_decision(self, decision: DecisionLabel) {
        match self {
            Self::Prepared(_, prepared, _) => prepared.counters.decision(decision),
            Self::Name(name, _) => adhoc::decision(name, decision),
        }
    }

    pub(crate) fn count_released(self) {
        match self {
            Self::Prepared(_, prepared, _) => prepared.counters.released(),
            Self::Name(name, _) => adhoc::released(name),
        }
    }

    pub(crate) fn count_store_error(self, op: StoreOp) {
        match self {
            Self::Prepared(_, prepared, _) => prepared.counters.store_error(op),
            Self::Name(name, _) => adhoc::store_error(name, op),
        }
    }

    pub(crate) fn count_stale_owner(self, op: StoreOp) {
        match self {
            Self::Prepared(_, prepared, _) => prepared.counters.stale_owner(op),
            Self::Name(name, _) => adhoc::stale_owner(name, op),
        }
    }
}
