//! Key derivations: how a front end's key becomes the storage key its records are kept under,
//! version by version, and which key the previous version gave it.
//!
//! Each record says which derivation wrote its key ([`Record::key_derivation`](crate::Record)).
//! When a release changes how a mechanism's keys are derived, nodes with previous keys read
//! (`Idempotency::with_previous_keys`, the SQL stores' `with_previous_keys`) claim the previous
//! derivation's key first and then their own, for one TTL after the deploy: a retry in flight
//! during a rolling deploy, or a record the previous release completed, is then never run a
//! second time. Only the previous derivation is read: a fleet upgrades one release at a time.
//!
//! | version | keys |
//! |---|---|
//! | 1 | every mechanism keyed as a request ([`Mechanism::Request`]), as release 0.1 did |
//! | 2 | functions ([`Mechanism::Function`]) and claims in transactions ([`Mechanism::Transaction`]) keyed by their mechanism; consumers keyed as requests in their fast tier and as transactions in their SQL truth |
//! | 3 | consumers keyed as messages ([`Mechanism::Message`]) in both tiers: one message has one storage key in both |

use crate::Mechanism;

/// The derivation this release writes.
pub(crate) const CURRENT: u8 = 3;

/// Where a key is claimed: through the engine, or inside a SQL transaction. A consumer's fast
/// tier claims through the engine and its SQL truth in a transaction, and the two were keyed
/// apart before version 3.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tier {
    /// [`Idempotency`](crate::Idempotency)'s claims.
    Engine,
    /// Claims in the caller's SQL transaction (`idempotency_sql::TxStore`, which keeps its own
    /// copy of this tier's column of the table): kept here so the table stays whole and tested.
    #[cfg_attr(not(test), allow(dead_code))]
    Transaction,
}

/// What a record's key was derived by: the mechanism it is for and the derivation's version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Origin {
    pub(crate) mechanism: Option<Mechanism>,
    pub(crate) derivation: u8,
}

impl Origin {
    /// A key of `mechanism` derived by this release.
    pub(crate) const fn current(mechanism: Option<Mechanism>) -> Self {
        Self {
            mechanism,
            derivation: CURRENT,
        }
    }
}

/// The mechanism whose domain tag derivation `version` hashes a key of `mechanism` under, on
/// `tier`.
fn keyed_as(version: u8, mechanism: Mechanism, tier: Tier) -> Mechanism {
    match (version, mechanism, tier) {
        (1, _, _) => Mechanism::Request,
        (2, Mechanism::Message, Tier::Engine) => Mechanism::Request,
        (2, Mechanism::Message, Tier::Transaction) => Mechanism::Transaction,
        _ => mechanism,
    }
}

/// The previous derivation of a key of `mechanism` on `tier`: its version and the mechanism it
/// keyed it as, if it keyed it otherwise than this release does (the latest version before
/// [`CURRENT`] that did).
pub(crate) fn previous(mechanism: Mechanism, tier: Tier) -> Option<(u8, Mechanism)> {
    let current = keyed_as(CURRENT, mechanism, tier);
    (1..CURRENT)
        .rev()
        .map(|version| (version, keyed_as(version, mechanism, tier)))
        .find(|(_, keyed)| *keyed != current)
}

/// The mechanism this release keys `mechanism` as on `tier` (itself).
#[cfg(test)]
fn current(mechanism: Mechanism, tier: Tier) -> Mechanism {
    keyed_as(CURRENT, mechanism, tier)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mechanism_names_its_previous_key() {
        use Mechanism::*;
        for tier in [Tier::Engine, Tier::Transaction] {
            for mechanism in Mechanism::ALL {
                assert_eq!(current(mechanism, tier), mechanism);
            }
            assert_eq!(previous(Request, tier), None);
            assert_eq!(previous(Function, tier), Some((1, Request)));
            assert_eq!(previous(Transaction, tier), Some((1, Request)));
        }
        assert_eq!(previous(Message, Tier::Engine), Some((2, Request)));
        assert_eq!(previous(Message, Tier::Transaction), Some((2, Transaction)));
    }
}
