//! Key derivations of claims in a transaction: which version this release writes, and which
//! key the previous version gave a claim of each mechanism.
//!
//! The same table as the engine's in `idempotency-core` (its `derivation` module), on the
//! transaction tier: version 1 keyed every mechanism as a request, version 2 keyed functions,
//! transactions and messages by their own mechanism but messages as transactions, version 3
//! keys messages as messages. The records say which version wrote them, so both must agree.

use idempotency_core::Mechanism;

/// The derivation this release writes.
pub(crate) const CURRENT: u8 = 3;

/// The previous derivation of a claim of `mechanism` in a transaction: its version and the
/// mechanism it keyed the claim as, if that differs from `mechanism` (the latest version
/// before [`CURRENT`] that did).
pub(crate) fn previous(mechanism: Mechanism) -> Option<(u8, Mechanism)> {
    match mechanism {
        Mechanism::Request => None,
        Mechanism::Message => Some((2, Mechanism::Transaction)),
        _ => Some((1, Mechanism::Request)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mechanism_names_its_previous_key() {
        use Mechanism::*;
        assert_eq!(previous(Request), None);
        assert_eq!(previous(Function), Some((1, Request)));
        assert_eq!(previous(Transaction), Some((1, Request)));
        assert_eq!(previous(Message), Some((2, Transaction)));
    }
}
