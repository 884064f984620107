//! Test support for the `idempotency` toolkit, as `tower-test` is for tower: the conformance
//! suite every [`Store`] and [`TokenStore`] passes, unchanged, the fault proxy and span capture.
//!
//! A backend's test file needs one line per suite:
//!
//! ```text
//! idempotency_test::store_conformance_tests!(async { Some(MyStore::connect(url).await.unwrap()) });
//! idempotency_test::token_conformance_tests!(async { Some(MyTokenStore::new()) });
//! ```
//!
//! The factory is an `async` expression giving `Option<Store>`; `None` skips the suite (use
//! [`unavailable`] so that under `CI=true` an unreachable server fails instead). Every check uses
//! fresh random keys, so suites may run in parallel against one shared server.
//!
//! [`FaultProxy`] fails the link to a real server (latency, black hole, reset, refusal) for the
//! fault tests of every front end. [`SpanCapture`] keeps the spans and events a test emits.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod conflicts;
mod fault_proxy;
mod operations;
mod spans;

pub use conflicts::conflict_marks;
pub use fault_proxy::{FaultProxy, LinkFault};
pub use operations::{
    KeptAudit, SharedBuffer, claimed, completed, operations_suite, unique_namespace,
};
pub use spans::{CapturedSpan, SpanCapture, captured};

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use idempotency_core::{
    Claim, ClaimId, ClaimRequest, FencingToken, Fingerprint, Lease, Mechanism, Outcome,
    RecordState, Scope, StorageKey, Store, StoreError,
};
use idempotency_core::{TokenOutcome, TokenStore};

/// Lease used by checks that do not wait for expiry.
const LONG: Duration = Duration::from_secs(30);
/// Lease used by checks that wait for expiry.
const SHORT: Duration = Duration::from_millis(300);
/// Comfortably past [`SHORT`].
const PAST_SHORT: Duration = Duration::from_millis(700);

/// Reports an unreachable service: under `CI=true` it panics (CI must not skip), otherwise it
/// prints why the suite is skipped and returns `None`.
pub fn unavailable<T>(service: &str, reason: impl std::fmt::Display) -> Option<T> {
    if std::env::var("CI").is_ok_and(|value| value == "true" || value == "1") {
        panic!("{service} is required in CI but unreachable: {reason}");
    }
    eprintln!("SKIPPED: {service} unreachable ({reason}); set CI=true to make this a failure");
    None
}

/// A fresh random key.
pub fn unique_key() -> StorageKey {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("randomness");
    StorageKey(bytes)
}

fn fingerprint(label: &str) -> Fingerprint {
    Fingerprint::of_bytes(label.as_bytes())
}

fn request<'a>(key: &'a StorageKey, fp: &'a Fingerprint, lease: Duration) -> ClaimRequest<'a> {
    ClaimRequest {
        key,
        namespace: "conformance",
        fingerprint: fp,
        lease,
        claim_id: ClaimId::random(),
        mechanism: Some(Mechanism::Function),
        key_derivation: Some(2),
    }
}

async fn acquire<S: Store>(
    store: &S,
    key: &StorageKey,
    fp: &Fingerprint,
    lease: Duration,
) -> Lease {
    match store.claim(request(key, fp, lease)).await.unwrap() {
        Claim::Acquired(lease) => lease,
        other => panic!("expected to acquire the key, got {other:?}"),
    }
}

/// A body with every byte value, to prove outcomes are stored as raw bytes.
fn binary_outcome() -> Outcome {
    let mut body: Vec<u8> = (0..=255u8).collect();
    body.extend_from_slice("é ✓ \0 end".as_bytes());
    Outcome::new(201, Bytes::from(body))
}

/// A claim answered at once ([`Store::claim_ready`]) is the answer `claim` gives: a new key is
/// taken (and then in flight for `claim`), a live key reports in flight or another payload's
/// mismatch, a completed key its outcome. A store that does not answer at once has nothing to
/// check here.
pub async fn ready_claims_answer_as_claim<S: Store>(store: &S) {
    let key = unique_key();
    let fp = fingerprint("ready");
    let Some(first) = store.claim_ready(request(&key, &fp, LONG)) else {
        return;
    };
    let lease = match first.unwrap() {
        Claim::Acquired(lease) => lease,
        other => panic!("expected to acquire a new key at once, got {other:?}"),
    };
    assert_eq!((lease.attempt, lease.took_over), (1, false));
    let awaited = store.claim(request(&key, &fp, LONG)).await.unwrap();
    assert!(matches!(awaited, Claim::InProgress { .. }), "{awaited:?}");
    if let Some(ready) = store.claim_ready(request(&key, &fp, LONG)) {
        let ready = ready.unwrap();
        assert!(matches!(ready, Claim::InProgress { .. }), "{ready:?}");
    }
    let other = fingerprint("other");
    if let Some(ready) = store.claim_ready(request(&key, &other, LONG)) {
        assert_eq!(ready.unwrap(), Claim::Mismatch);
    }
    let outcome = binary_outcome();
    store
        .complete(&key, lease.token, &outcome, LONG)
        .await
        .unwrap();
    if let Some(ready) = store.claim_ready(request(&key, &fp, LONG)) {
        assert_eq!(ready.unwrap(), Claim::Completed(outcome.clone()));
    }
    assert_eq!(
        store.claim(request(&key, &fp, LONG)).await.unwrap(),
        Claim::Completed(outcome)
    );
}

/// absent → in_progress → completed, with replay of the exact outcome.
pub async fn lifecycle<S: Store>(store: &S) {
    let key = unique_key();
    let fp = fingerprint("a");
    assert_eq!(store.get(&key).await.unwrap(), None);

    let lease = acquire(store, &key, &fp, LONG).await;
    assert_eq!(lease.attempt, 1);
    assert!(!lease.took_over);

    match store.claim(request(&key, &fp, LONG)).await.unwrap() {
        Claim::InProgress { lease_remaining } => assert!(lease_remaining <= LONG),
        other => panic!("expected in progress, got {other:?}"),
    }
    let record = store
        .get(&key)
        .await
        .unwrap()
        .expect("record while in progress");
    assert_eq!(record.state, RecordState::InProgress);
    assert_eq!(record.token, lease.token);
    assert_eq!(record.fingerprint, fp);
    assert_eq!(record.namespace, "conformance");
    assert_eq!(record.attempts, 1);
    assert_eq!(record.outcome, None);
    // The record says what wrote it.
    assert_eq!(
        (record.mechanism, record.key_derivation),
        (Some(Mechanism::Function), Some(2))
    );

    let outcome = binary_outcome();
    store
        .complete(&key, lease.token, &outcome, LONG)
        .await
        .unwrap();
    for _ in 0..2 {
        assert_eq!(
            store.claim(request(&key, &fp, LONG)).await.unwrap(),
            Claim::Completed(outcome.clone())
        );
    }
    let record = store
        .get(&key)
        .await
        .unwrap()
        .expect("record once completed");
    assert_eq!(record.state, RecordState::Completed);
    assert_eq!(record.outcome, Some(outcome));
    assert_eq!(
        (record.mechanism, record.key_derivation),
        (Some(Mechanism::Function), Some(2))
    );
    assert!(record.completed_at.is_some());
    assert!(record.expires_at > record.created_at);

    // A completed record cannot be completed or released again.
    let again = Outcome::new(200, "other");
    assert!(matches!(
        store.complete(&key, lease.token, &again, LONG).await,
        Err(StoreError::LeaseLost)
    ));
    assert!(matches!(
        store.release(&key, lease.token).await,
        Err(StoreError::LeaseLost)
    ));
}

/// The same key with another fingerprint is a mismatch, in progress and completed, and the
/// record is untouched.
pub async fn mismatch<S: Store>(store: &S) {
    let key = unique_key();
    let (a, b) = (fingerprint("a"), fingerprint("b"));
    let lease = acquire(store, &key, &a, LONG).await;
    assert_eq!(
        store.claim(request(&key, &b, LONG)).await.unwrap(),
        Claim::Mismatch
    );
    let outcome = Outcome::new(200, "done");
    store
        .complete(&key, lease.token, &outcome, LONG)
        .await
        .unwrap();
    assert_eq!(
        store.claim(request(&key, &b, LONG)).await.unwrap(),
        Claim::Mismatch
    );
    assert_eq!(
        store.claim(request(&key, &a, LONG)).await.unwrap(),
        Claim::Completed(outcome)
    );
    assert_eq!(store.get(&key).await.unwrap().unwrap().fingerprint, a);
}

/// An expired lease is taken over with a greater token; the stale owner is refused everywhere.
pub async fn takeover_and_fencing<S: Store>(store: &S) {
    let key = unique_key();
    let fp = fingerprint("a");
    let first = acquire(store, &key, &fp, SHORT).await;
    tokio::time::sleep(PAST_SHORT).await;

    let second = acquire(store, &key, &fp, LONG).await;
    assert!(second.took_over, "an expired lease is a takeover");
    assert_eq!(second.attempt, 2);
    assert!(second.token > first.token, "takeover token must be greater");

    let stale = Outcome::new(200, "stale");
    assert!(matches!(
        store.complete(&key, first.token, &stale, LONG).await,
        Err(StoreError::LeaseLost)
    ));
    assert!(matches!(
        store.touch(&key, first.token, LONG).await,
        Err(StoreError::LeaseLost)
    ));
    assert!(matches!(
        store.release(&key, first.token).await,
        Err(StoreError::LeaseLost)
    ));

    let fresh = Outcome::new(200, "fresh");
    store
        .complete(&key, second.token, &fresh, LONG)
        .await
        .unwrap();
    let record = store.get(&key).await.unwrap().unwrap();
    assert_eq!(record.outcome, Some(fresh));
    assert_eq!(record.attempts, 2);
}

/// An expired lease is taken over even with another fingerprint (the crashed attempt left
/// nothing to protect); the new fingerprint holds from then on.
pub async fn takeover_with_other_payload<S: Store>(store: &S) {
    let key = unique_key();
    let (a, b) = (fingerprint("a"), fingerprint("b"));
    acquire(store, &key, &a, SHORT).await;
    tokio::time::sleep(PAST_SHORT).await;
    // Taken over by a claimer that says nothing of what it is: the record says so too.
    let taken = store
        .claim(ClaimRequest {
            mechanism: None,
            key_derivation: None,
            ..request(&key, &b, LONG)
        })
        .await
        .unwrap();
    let Claim::Acquired(lease) = taken else {
        panic!("an expired lease is taken over: {taken:?}");
    };
    assert!(lease.took_over);
    let record = store.get(&key).await.unwrap().expect("record");
    assert_eq!((record.mechanism, record.key_derivation), (None, None));
    assert_eq!(
        store.claim(request(&key, &a, LONG)).await.unwrap(),
        Claim::Mismatch
    );
}

/// Keep-alive: a touched lease is not taken over.
pub async fn touch_extends_lease<S: Store>(store: &S) {
    let key = unique_key();
    let fp = fingerprint("a");
    let lease = acquire(store, &key, &fp, SHORT).await;
    tokio::time::sleep(SHORT / 2).await;
    let touched_at = std::time::SystemTime::now();
    store
        .touch(&key, lease.token, Duration::from_secs(5))
        .await
        .unwrap();
    // The record says so too: renewed now, its lease ending 5 s on (to the millisecond).
    let record = store.get(&key).await.unwrap().expect("record");
    let slack = Duration::from_millis(2);
    assert!(record.updated_at + slack >= touched_at, "{record:?}");
    assert!(
        record.expires_at + slack >= touched_at + Duration::from_secs(5),
        "{record:?}"
    );
    tokio::time::sleep(PAST_SHORT).await;
    match store.claim(request(&key, &fp, LONG)).await.unwrap() {
        Claim::InProgress { lease_remaining } => assert!(
            lease_remaining > Duration::from_secs(3),
            "{lease_remaining:?}"
        ),
        other => panic!("expected in progress, got {other:?}"),
    }
    store
        .complete(&key, lease.token, &Outcome::new(200, "ok"), LONG)
        .await
        .unwrap();
}

/// Release frees the key; a later owner's token is greater; the released owner stays refused.
pub async fn release_and_reclaim<S: Store>(store: &S) {
    let key = unique_key();
    let fp = fingerprint("a");
    let first = acquire(store, &key, &fp, LONG).await;
    assert!(matches!(
        store
            .release(
                &key,
                FencingToken::new(first.token.get().wrapping_add(1000))
            )
            .await,
        Err(StoreError::LeaseLost)
    ));
    assert!(
        store.get(&key).await.unwrap().is_some(),
        "a refused release changes nothing"
    );
    store.release(&key, first.token).await.unwrap();
    assert_eq!(store.get(&key).await.unwrap(), None);

    let second = acquire(store, &key, &fingerprint("b"), LONG).await;
    assert!(second.token > first.token, "tokens never go backwards");
    assert!(matches!(
        store
            .complete(&key, first.token, &Outcome::new(200, "x"), LONG)
            .await,
        Err(StoreError::LeaseLost)
    ));
    store
        .complete(&key, second.token, &Outcome::new(200, "y"), LONG)
        .await
        .unwrap();
}

/// An undo deletes nothing but an in-progress claim under its own claim id: not another claim,
/// not a completed record, not an absent key. (That it deletes a claim whose answer never came
/// is shown end to end, through a fault proxy, by each store's fault tests.)
pub async fn undo_spares_other_claims<S: Store>(store: &S) {
    let key = unique_key();
    let fp = fingerprint("a");
    let undo = |claim_id| store.undo_claim(&key, claim_id);
    assert!(!undo(ClaimId::random()).await.unwrap(), "an absent key");
    let claim_id = ClaimId::random();
    let claimed = store
        .claim(ClaimRequest {
            claim_id,
            ..request(&key, &fp, LONG)
        })
        .await
        .unwrap();
    let Claim::Acquired(lease) = claimed else {
        panic!("a fresh key is acquired: {claimed:?}");
    };
    assert!(
        !undo(ClaimId::random()).await.unwrap(),
        "another claim's id"
    );
    let record = store.get(&key).await.unwrap().expect("the claim stays");
    assert_eq!(record.state, RecordState::InProgress);
    store
        .complete(&key, lease.token, &Outcome::new(200, "ok"), LONG)
        .await
        .unwrap();
    assert!(!undo(claim_id).await.unwrap(), "a completed record");
    let record = store.get(&key).await.unwrap().expect("the outcome stays");
    assert_eq!(record.state, RecordState::Completed);
}

/// What a key holds, as the contract says (no lease expires during a walk).
#[derive(Clone, Debug, PartialEq)]
enum Modelled {
    Absent,
    InProgress {
        token: FencingToken,
        fp: Fingerprint,
    },
    Completed {
        fp: Fingerprint,
        outcome: Outcome,
    },
}

/// A small deterministic generator (SplitMix64) for random walks, so that a failing walk
/// replays from its seed.
///
/// ```
/// use idempotency_test::Walk;
/// let (mut a, mut b) = (Walk::new(7), Walk::new(7));
/// assert_eq!(a.below(10), b.below(10));
/// ```
pub struct Walk(u64);

impl Walk {
    /// A walk from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The walk's random start from the environment variable `name` (to replay a walk), else a fresh one.
    pub fn seed_from_env(name: &str) -> u64 {
        std::env::var(name)
            .ok()
            .and_then(|seed| seed.parse().ok())
            .unwrap_or_else(|| {
                unique_key().0[0..8]
                    .iter()
                    .fold(0u64, |a, b| a << 8 | u64::from(*b))
            })
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Steps a few keys through random claims (awaited or answered at once), completes, releases,
/// touches and reads, with the current owner's token, an older one of the same key, or a forged
/// one, and checks every answer against a model of the contract: who may complete, release or
/// touch; what a claim answers in each state; that tokens of a key only grow; and what `get`
/// reads back. `CONFORMANCE_SEED` replays a walk; a failure names its seed and step.
pub async fn model_walk<S: Store>(store: &S) {
    let seed = Walk::seed_from_env("CONFORMANCE_SEED");
    let mut walk = Walk::new(seed);
    let mut keys: Vec<StorageKey> = (0..3).map(|_| unique_key()).collect();
    let fps = [fingerprint("walk-a"), fingerprint("walk-b")];
    let outcomes: Vec<Outcome> = (0..3u16)
        .map(|i| Outcome::new(200 + i, format!("answer {i}")))
        .chain([binary_outcome()])
        .collect();
    let mut model = vec![Modelled::Absent; keys.len()];
    let mut issued: Vec<Vec<FencingToken>> = vec![Vec::new(); keys.len()];
    // How often each answer came: every kind must, or the walk proved less than it says.
    let mut seen: std::collections::BTreeMap<&str, usize> = Default::default();
    for step in 0..600 {
        let k = walk.below(keys.len());
        if walk.below(8) == 0 {
            // Now and then a new key takes this one's place: a completed key stays completed.
            keys[k] = unique_key();
            (model[k], issued[k]) = (Modelled::Absent, Vec::new());
        }
        let key = &keys[k];
        let at = format!("seed {seed}, step {step}, key {k}, model {:?}", model[k]);
        // The owner's token if any was issued, an older one, or one never issued.
        let token = match (walk.below(5), issued[k].as_slice()) {
            (0, _) | (_, []) => FencingToken::new(walk.next_u64() | 1 << 62),
            (1, older) => older[walk.below(older.len())],
            (_, tokens) => tokens[tokens.len() - 1],
        };
        let owns = matches!(&model[k], Modelled::InProgress { token: t, .. } if *t == token);
        match walk.below(6) {
            0 | 1 => {
                let fp = &fps[walk.below(fps.len())];
                let claim = request(key, fp, LONG);
                let answer = store
                    .claim(claim)
                    .await
                    .unwrap_or_else(|error| panic!("{at}: claim failed: {error}"));
                model[k] = match (&model[k], answer) {
                    (Modelled::Absent, Claim::Acquired(lease)) => {
                        assert_eq!((lease.attempt, lease.took_over), (1, false), "{at}");
                        assert!(
                            issued[k].iter().all(|old| lease.token > *old),
                            "{at}: token {:?} does not exceed the key's earlier tokens {:?}",
                            lease.token,
                            issued[k]
                        );
                        issued[k].push(lease.token);
                        *seen.entry("claim acquired").or_default() += 1;
                        Modelled::InProgress {
                            token: lease.token,
                            fp: *fp,
                        }
                    }
                    (Modelled::InProgress { fp: held, .. }, Claim::InProgress { .. })
                        if held == fp =>
                    {
                        *seen.entry("claim in progress").or_default() += 1;
                        model[k].clone()
                    }
                    (Modelled::Completed { fp: held, outcome }, Claim::Completed(replayed))
                        if held == fp =>
                    {
                        assert_eq!(&replayed, outcome, "{at}: the replay is not the outcome");
                        *seen.entry("claim completed").or_default() += 1;
                        model[k].clone()
                    }
                    (Modelled::InProgress { fp: held, .. }, Claim::Mismatch)
                    | (Modelled::Completed { fp: held, .. }, Claim::Mismatch)
                        if held != fp =>
                    {
                        *seen.entry("claim mismatch").or_default() += 1;
                        model[k].clone()
                    }
                    (_, answer) => panic!("{at}: claim with {fp:?} answered {answer:?}"),
                };
            }
            2 => {
                let outcome = &outcomes[walk.below(outcomes.len())];
                let answer = store.complete(key, token, outcome, LONG).await;
                match (owns, answer) {
                    (true, Ok(())) => {
                        let Modelled::InProgress { fp, .. } = model[k] else {
                            unreachable!()
                        };
                        model[k] = Modelled::Completed {
                            fp,
                            outcome: outcome.clone(),
                        };
                        *seen.entry("complete").or_default() += 1;
                    }
                    (false, Err(StoreError::LeaseLost)) => {
                        *seen.entry("complete refused").or_default() += 1;
                    }
                    (owns, answer) => {
                        panic!("{at}: complete with {token:?} (owner: {owns}) answered {answer:?}")
                    }
                }
            }
            3 => match (owns, store.release(key, token).await) {
                (true, Ok(())) => {
                    model[k] = Modelled::Absent;
                    *seen.entry("release").or_default() += 1;
                }
                (false, Err(StoreError::LeaseLost)) => {
                    *seen.entry("release refused").or_default() += 1;
                }
                (owns, answer) => {
                    panic!("{at}: release with {token:?} (owner: {owns}) answered {answer:?}")
                }
            },
            4 => match (owns, store.touch(key, token, LONG).await) {
                (true, Ok(())) => *seen.entry("touch").or_default() += 1,
                (false, Err(StoreError::LeaseLost)) => {
                    *seen.entry("touch refused").or_default() += 1;
                }
                (owns, answer) => {
                    panic!("{at}: touch with {token:?} (owner: {owns}) answered {answer:?}")
                }
            },
            _ => {
                let record = store
                    .get(key)
                    .await
                    .unwrap_or_else(|error| panic!("{at}: get failed: {error}"));
                match (&model[k], record) {
                    (Modelled::Absent, None) => *seen.entry("get absent").or_default() += 1,
                    (Modelled::InProgress { token, fp }, Some(record)) => {
                        *seen.entry("get in progress").or_default() += 1;
                        assert_eq!(record.state, RecordState::InProgress, "{at}");
                        assert_eq!((record.token, record.fingerprint), (*token, *fp), "{at}");
                        assert_eq!((record.attempts, record.outcome), (1, None), "{at}");
                    }
                    (Modelled::Completed { fp, outcome }, Some(record)) => {
                        *seen.entry("get completed").or_default() += 1;
                        assert_eq!(record.state, RecordState::Completed, "{at}");
                        assert_eq!(record.fingerprint, *fp, "{at}");
                        assert_eq!(record.outcome.as_ref(), Some(outcome), "{at}");
                        assert!(record.completed_at.is_some(), "{at}");
                    }
                    (_, record) => panic!("{at}: get read {record:?}"),
                }
            }
        }
    }
    assert_eq!(
        seen.len(),
        13,
        "seed {seed}: some answers never came: {seen:?}"
    );
}

/// Steps on a key that was never claimed are refused.
pub async fn unknown_key_is_refused<S: Store>(store: &S) {
    let key = unique_key();
    let token = FencingToken::new(1);
    assert!(matches!(
        store
            .complete(&key, token, &Outcome::new(200, "x"), LONG)
            .await,
        Err(StoreError::LeaseLost)
    ));
    assert!(matches!(
        store.touch(&key, token, LONG).await,
        Err(StoreError::LeaseLost)
    ));
    assert!(matches!(
        store.release(&key, token).await,
        Err(StoreError::LeaseLost)
    ));
    assert_eq!(store.get(&key).await.unwrap(), None);
}

/// A purge keeps an abandoned lease for the store's grace (an hour by default): the next claim
/// still sees the crashed owner and reports the takeover.
pub async fn abandoned_lease_outlives_purge<S: Store>(store: &S) {
    let key = unique_key();
    let fp = fingerprint("a");
    let first = acquire(store, &key, &fp, SHORT).await;
    tokio::time::sleep(PAST_SHORT).await;
    store.purge_expired(1_000_000).await.unwrap();
    let record = store
        .get(&key)
        .await
        .unwrap()
        .expect("an abandoned lease is kept for its grace");
    assert_eq!(record.state, RecordState::InProgress);
    assert_eq!(record.token, first.token);
    let second = acquire(store, &key, &fp, LONG).await;
    assert!(second.took_over, "the crashed owner is still seen");
    assert_eq!(second.attempt, 2);
    assert!(second.token > first.token);
}

/// A completed record past its TTL is gone: the next claim is a fresh first attempt, and a
/// purge removes it.
pub async fn completed_expiry_and_purge<S: Store>(store: &S) {
    let key = unique_key();
    let fp = fingerprint("a");
    let lease = acquire(store, &key, &fp, LONG).await;
    store
        .complete(&key, lease.token, &Outcome::new(200, "old"), SHORT)
        .await
        .unwrap();
    tokio::time::sleep(PAST_SHORT).await;
    let next = acquire(store, &key, &fingerprint("other"), LONG).await;
    assert!(!next.took_over);
    assert_eq!(next.attempt, 1);
    assert!(next.token > lease.token);
    store
        .complete(&key, next.token, &Outcome::new(200, "new"), SHORT)
        .await
        .unwrap();

    tokio::time::sleep(PAST_SHORT).await;
    store.purge_expired(1_000_000).await.unwrap();
    assert_eq!(store.get(&key).await.unwrap(), None, "purged after its TTL");
}

/// Many keys at once stay independent.
pub async fn keys_are_independent<S: Store>(store: Arc<S>) {
    let tasks: Vec<_> = (0..50)
        .map(|index| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let key = unique_key();
                let fp = fingerprint("a");
                let lease = acquire(&*store, &key, &fp, LONG).await;
                let outcome = Outcome::new(200, format!("value {index}"));
                store
                    .complete(&key, lease.token, &outcome, LONG)
                    .await
                    .unwrap();
                assert_eq!(
                    store.claim(request(&key, &fp, LONG)).await.unwrap(),
                    Claim::Completed(outcome)
                );
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

/// 1000 concurrent claims of one key: exactly one wins; after completion, 1000 more all replay.
pub async fn claim_storm<S: Store>(store: Arc<S>) {
    const CALLERS: usize = 1000;
    let key = unique_key();
    let fp = fingerprint("storm");
    let claims = concurrently(CALLERS, |_| {
        let store = Arc::clone(&store);
        async move { store.claim(request(&key, &fp, LONG)).await.unwrap() }
    })
    .await;
    let winners: Vec<Lease> = claims
        .iter()
        .filter_map(|claim| match claim {
            Claim::Acquired(lease) => Some(*lease),
            _ => None,
        })
        .collect();
    assert_eq!(
        winners.len(),
        1,
        "exactly one of {CALLERS} concurrent claims wins"
    );
    assert!(
        claims
            .iter()
            .all(|claim| matches!(claim, Claim::Acquired(_) | Claim::InProgress { .. })),
        "every loser sees the claim in progress"
    );

    let outcome = Outcome::new(200, "once");
    store
        .complete(&key, winners[0].token, &outcome, LONG)
        .await
        .unwrap();
    let replays = concurrently(CALLERS, |_| {
        let store = Arc::clone(&store);
        async move { store.claim(request(&key, &fp, LONG)).await.unwrap() }
    })
    .await;
    assert!(
        replays
            .iter()
            .all(|claim| *claim == Claim::Completed(outcome.clone()))
    );
}

/// Runs `count` futures made by `make(index)` as tasks released together (a barrier), and
/// returns their outputs in index order: the storms of the conformance suite and of the SQL
/// scenarios.
pub async fn concurrently<T, F>(count: usize, make: impl Fn(usize) -> F) -> Vec<T>
where
    T: Send + 'static,
    F: std::future::Future<Output = T> + Send + 'static,
{
    let barrier = Arc::new(tokio::sync::Barrier::new(count));
    let tasks: Vec<_> = (0..count)
        .map(|index| {
            let barrier = Arc::clone(&barrier);
            let work = make(index);
            tokio::spawn(async move {
                barrier.wait().await;
                work.await
            })
        })
        .collect();
    let mut results = Vec::with_capacity(count);
    for task in tasks {
        results.push(task.await.unwrap());
    }
    results
}

/// One-time tokens: consumed once, scoped, expiring, and exactly one of 100 concurrent
/// consumers wins.
pub async fn tokens<T: TokenStore>(tokens: Arc<T>) {
    let scope = Scope::new("conformance.tokens").with_principal(unique_key().to_hex());
    let token = tokens.issue(&scope, LONG).await.unwrap();
    assert!(token.value.len() >= 22, "at least 128 bits");
    assert!(
        token
            .value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    );
    let other_scope = Scope::new("conformance.tokens").with_principal("someone else");
    assert_eq!(
        tokens.consume(&other_scope, &token.value).await.unwrap(),
        TokenOutcome::Invalid
    );
    assert_eq!(
        tokens.consume(&scope, &token.value).await.unwrap(),
        TokenOutcome::Consumed
    );
    assert_eq!(
        tokens.consume(&scope, &token.value).await.unwrap(),
        TokenOutcome::Invalid
    );
    assert_eq!(
        tokens.consume(&scope, "never-issued").await.unwrap(),
        TokenOutcome::Invalid
    );

    let short = tokens.issue(&scope, SHORT).await.unwrap();
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(
        tokens.consume(&scope, &short.value).await.unwrap(),
        TokenOutcome::Invalid
    );

    let contested = tokens.issue(&scope, LONG).await.unwrap();
    let outcomes = concurrently(100, |_| {
        let tokens = Arc::clone(&tokens);
        let scope = scope.clone();
        let value = contested.value.clone();
        async move { tokens.consume(&scope, &value).await.unwrap() }
    })
    .await;
    let consumed = outcomes
        .iter()
        .filter(|o| **o == TokenOutcome::Consumed)
        .count();
    assert_eq!(consumed, 1, "exactly one of 100 concurrent consumers wins");
}

/// Generates one `#[tokio::test]` per store check. `$make` is an `async` expression giving
/// `Option<Store>` (`None` skips; see [`unavailable`]).
#[macro_export]
macro_rules! store_conformance_tests {
    ($make:expr) => {
        $crate::store_conformance_tests!(@tests $make;
            lifecycle, mismatch, takeover_and_fencing, takeover_with_other_payload,
            touch_extends_lease, release_and_reclaim, unknown_key_is_refused,
            completed_expiry_and_purge, abandoned_lease_outlives_purge,
            ready_claims_answer_as_claim, model_walk, undo_spares_other_claims,
            conflict_marks);
        $crate::store_conformance_tests!(@shared $make; keys_are_independent, claim_storm);
    };
    (@tests $make:expr; $($check:ident),*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $check() {
            if let Some(store) = $make.await {
                $crate::$check(&store).await;
            }
        }
    )*};
    (@shared $make:expr; $($check:ident),*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $check() {
            if let Some(store) = $make.await {
                $crate::$check(::std::sync::Arc::new(store)).await;
            }
        }
    )*};
}

/// Generates the token conformance test. `$make` is an `async` expression giving
/// `Option<TokenStore>`.
#[macro_export]
macro_rules! token_conformance_tests {
    ($make:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn one_time_tokens() {
            if let Some(tokens) = $make.await {
                $crate::tokens(::std::sync::Arc::new(tokens)).await;
            }
        }
    };
}
