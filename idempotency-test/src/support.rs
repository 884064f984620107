//! What every suite shares: leases, fresh keys, requests, outcomes, storms, and the skip of
//! an unreachable server.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use idempotency_core::{
    Claim, ClaimId, ClaimRequest, CompleteRequest, Decision, Execution, FencingToken, Fingerprint,
    Idempotency, InFlightPolicy, Lease, Mechanism, Outcome, Scope, StorageKey, Store, StoreError,
    TouchRequest,
};

/// Lease used by checks that do not wait for expiry.
pub(crate) const LONG: Duration = Duration::from_secs(30);
/// Lease used by checks that wait for expiry.
pub(crate) const SHORT: Duration = Duration::from_millis(300);
/// Comfortably past [`SHORT`].
pub(crate) const PAST_SHORT: Duration = Duration::from_millis(700);

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

/// A fresh key claimed through the engine `owner` under `scope` with `fingerprint`: the key and
/// its execution. Panics unless the claim executes.
pub async fn executing<S: Store>(
    owner: &Idempotency<S>,
    scope: &Scope,
    fingerprint: &Fingerprint,
) -> (StorageKey, Execution<S>) {
    let key = unique_key();
    let claim = owner.claim(scope, key, fingerprint, InFlightPolicy::Reject);
    let Decision::Execute(execution) = claim.await.expect("the claim") else {
        panic!("a new key is claimed");
    };
    (key, execution)
}

pub(crate) fn fingerprint(label: &str) -> Fingerprint {
    Fingerprint::of_bytes(label.as_bytes())
}

pub(crate) fn request<'a>(
    key: &'a StorageKey,
    fp: &'a Fingerprint,
    lease: Duration,
) -> ClaimRequest<'a> {
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

pub(crate) async fn acquire<S: Store>(
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

/// [`Store::complete`] of `key` for the owner of `token`: `outcome`, kept for `ttl`.
pub(crate) async fn complete<S: Store>(
    store: &S,
    key: &StorageKey,
    token: FencingToken,
    outcome: &Outcome,
    ttl: Duration,
) -> Result<(), StoreError> {
    let request = CompleteRequest {
        key,
        token,
        outcome,
        ttl,
    };
    store.complete(request).await
}

/// [`Store::touch`] of `key` for the owner of `token`: its lease renewed to `lease`.
pub(crate) async fn touch<S: Store>(
    store: &S,
    key: &StorageKey,
    token: FencingToken,
    lease: Duration,
) -> Result<(), StoreError> {
    store.touch(TouchRequest { key, token, lease }).await
}

/// A body with every byte value, to prove outcomes are stored as raw bytes.
pub(crate) fn binary_outcome() -> Outcome {
    let mut body: Vec<u8> = (0..=255u8).collect();
    body.extend_from_slice("é ✓ \0 end".as_bytes());
    Outcome::new(201, Bytes::from(body))
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
