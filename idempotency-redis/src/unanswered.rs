//! The tokens of this process's claims whose answers never came (an error, a timeout, a
//! dropped call): what [`Store::undo_claim`](idempotency_core::Store::undo_claim) names, since a Redis
//! claim's token is chosen here, before the command is sent.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use idempotency_core::{ClaimId, StorageKey};

/// The most unanswered claims remembered at once; past it the oldest are forgotten (their
/// leases end on their own).
const CAPACITY: usize = 65_536;

/// Claims sent without an answer, by claim id.
#[derive(Default)]
pub(super) struct Unanswered {
    claims: Mutex<HashMap<ClaimId, (StorageKey, u64)>>,
}

impl Unanswered {
    fn lock(&self) -> MutexGuard<'_, HashMap<ClaimId, (StorageKey, u64)>> {
        self.claims.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The token `claim_id` was sent with for `key`, if it is remembered.
    pub(super) fn token(&self, claim_id: ClaimId, key: &StorageKey) -> Option<u64> {
        match self.lock().get(&claim_id) {
            Some((held, token)) if held == key => Some(*token),
            _ => None,
        }
    }

    /// Forgets `claim_id`, once undone (or known not to need it).
    pub(super) fn forget(&self, claim_id: ClaimId) {
        self.lock().remove(&claim_id);
    }

    /// Remembers a claim whose answer did not come.
    fn remember(&self, claim_id: ClaimId, key: StorageKey, token: u64) {
        let mut claims = self.lock();
        if claims.len() >= CAPACITY {
            claims.clear();
        }
        claims.insert(claim_id, (key, token));
    }
}

/// A claim on its way: unless [`answered`](Self::answered), it is remembered as unanswered when
/// dropped (an error returned, a timeout, the caller gone).
pub(super) struct Sent<'a> {
    unanswered: &'a Unanswered,
    claim: Option<(ClaimId, StorageKey, u64)>,
}

impl<'a> Sent<'a> {
    /// A claim about to be sent with `token`.
    pub(super) fn new(
        unanswered: &'a Unanswered,
        claim_id: ClaimId,
        key: StorageKey,
        token: u64,
    ) -> Self {
        Self {
            unanswered,
            claim: Some((claim_id, key, token)),
        }
    }

    /// Its answer came: nothing to undo.
    pub(super) fn answered(mut self) {
        self.claim = None;
    }
}

impl Drop for Sent<'_> {
    fn drop(&mut self) {
        if let Some((claim_id, key, token)) = self.claim.take() {
            self.unanswered.remember(claim_id, key, token);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_unanswered_claims_are_remembered() {
        let unanswered = Unanswered::default();
        let (key, other) = (StorageKey([1; 32]), StorageKey([2; 32]));
        let (lost, answered) = (ClaimId::random(), ClaimId::random());
        drop(Sent::new(&unanswered, lost, key, 7));
        Sent::new(&unanswered, answered, key, 8).answered();
        assert_eq!(unanswered.token(answered, &key), None);
        assert_eq!(unanswered.token(lost, &other), None, "another key's claim");
        assert_eq!(unanswered.token(lost, &key), Some(7));
        unanswered.forget(lost);
        assert_eq!(unanswered.token(lost, &key), None, "forgotten once undone");
    }
}
