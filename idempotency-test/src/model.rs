//! The model walk: random claims, completes, releases and reads checked against a model of the
//! record lifecycle.

use idempotency_core::{
    Claim, FencingToken, Fingerprint, Outcome, RecordState, StorageKey, Store, StoreError,
};

use crate::support::{LONG, binary_outcome, complete, fingerprint, request, touch, unique_key};

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
                let answer = complete(store, key, token, outcome, LONG).await;
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
            4 => match (owns, touch(store, key, token, LONG).await) {
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
