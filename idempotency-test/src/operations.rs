//! The operations suite every store with [`Operations`] passes, unchanged: list and count by
//! status, fenced and audited release, complete and delete, reconciliation, purge with a JSON
//! lines archive.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::{complete, touch};
use idempotency_core::{
    BoxFuture, Claim, ClaimId, ClaimRequest, Fingerprint, Mechanism, Outcome, RecordState, Scope,
    StorageKey, Store, StoreError,
};
use idempotency_operations::{
    Acted, Action, Actor, Admin, Archive, AuditEntry, AuditLog, Cursor, Fence, FenceRefusal,
    Operations, Query, Status, Step,
};

/// An [`AuditLog`] that keeps its entries in memory, for tests to read back.
#[derive(Clone, Debug, Default)]
pub struct KeptAudit(pub Arc<Mutex<Vec<AuditEntry>>>);

impl KeptAudit {
    /// The entries written so far.
    pub fn entries(&self) -> Vec<AuditEntry> {
        self.0
            .lock()
            .map(|entries| entries.clone())
            .unwrap_or_default()
    }
}

impl AuditLog for KeptAudit {
    fn write<'a>(&'a self, entry: &'a AuditEntry) -> BoxFuture<'a, Result<(), StoreError>> {
        if let Ok(mut entries) = self.0.lock() {
            entries.push(entry.clone());
        }
        Box::pin(std::future::ready(Ok(())))
    }
}

/// A `Write` into shared memory: a JSON lines archive tests read back.
#[derive(Clone, Debug, Default)]
pub struct SharedBuffer(pub Arc<Mutex<Vec<u8>>>);

impl SharedBuffer {
    /// What was written, as text.
    pub fn text(&self) -> String {
        self.0
            .lock()
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or_default()
    }
}

impl Write for SharedBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| std::io::Error::other("poisoned"))?
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A namespace no other test uses.
pub fn unique_namespace(label: &str) -> String {
    format!("{label}.{}", &super::unique_key().to_hex()[..12])
}

/// Claims `raw` in `scope` for `lease`; its storage key.
pub async fn claimed<S: Store>(store: &S, scope: &Scope, raw: &str, lease: Duration) -> StorageKey {
    let key = scope.storage_key_for(Mechanism::Request, raw);
    let claim = store
        .claim(ClaimRequest {
            key: &key,
            namespace: scope.namespace(),
            fingerprint: &Fingerprint::of_bytes(raw.as_bytes()),
            lease,
            claim_id: ClaimId::random(),
            mechanism: Some(Mechanism::Request),
            key_derivation: None,
        })
        .await
        .expect("claim");
    assert!(matches!(claim, Claim::Acquired(_)), "{raw}: {claim:?}");
    key
}

/// Claims and completes `raw` with `outcome`, kept `ttl`.
pub async fn completed<S: Store>(
    store: &S,
    scope: &Scope,
    raw: &str,
    outcome: &Outcome,
    ttl: Duration,
) -> StorageKey {
    let key = claimed(store, scope, raw, Duration::from_secs(30)).await;
    let record = store.get(&key).await.expect("get").expect("claimed");
    complete(store, &key, record.token, outcome, ttl)
        .await
        .expect("complete");
    key
}

/// The whole suite on `store`, scanning `batch` records per round trip. `expires_natively`:
/// the store deletes expired records itself (Redis), so a purge may find none.
pub async fn operations_suite<S>(store: S, batch: usize, expires_natively: bool)
where
    S: Store + Operations + Clone,
{
    let namespace = unique_namespace("ops");
    let scope = Scope::new(namespace.clone());
    // Far longer than the suite, slow scans of a busy shared server included: only `A`'s lease
    // ends while it runs.
    let long = Duration::from_secs(600);
    let abandoned = claimed(&store, &scope, "A", Duration::from_millis(150)).await;
    let running = claimed(&store, &scope, "B", long).await;
    let done = completed(&store, &scope, "C", &Outcome::new(201, "done"), long).await;
    let by_hand = claimed(&store, &scope, "D", long).await;
    // A record of another namespace, which no query of this one sees.
    let other = claimed(&store, &Scope::new(unique_namespace("other")), "A", long).await;
    tokio::time::sleep(Duration::from_millis(400)).await;

    let audit = KeptAudit::default();
    let admin = Admin::new(store.clone(), audit.clone()).with_batch(batch);
    let in_namespace = |query: Query| query.namespace(namespace.clone());
    let mut pages = 0;
    let stuck = admin
        .list(&in_namespace(Query::stuck(None)), 100, &mut |_| pages += 1)
        .await
        .expect("list stuck");
    assert_eq!(
        keys(&stuck),
        vec![abandoned],
        "only the ended lease is abandoned"
    );
    assert!(pages >= 1);
    assert_eq!(stuck[0].attempts, 1);
    assert_eq!(stuck[0].namespace, namespace);
    let mut older = keys(
        &admin
            .list(
                &in_namespace(Query::stuck(Some(Duration::ZERO))),
                100,
                &mut |_| {},
            )
            .await
            .expect("list older"),
    );
    older.sort();
    let mut in_progress = vec![abandoned, running, by_hand];
    in_progress.sort();
    assert_eq!(
        older, in_progress,
        "--older-than 0s: every in-progress record"
    );
    let limited = admin
        .list(&in_namespace(Query::all()), 2, &mut |_| {})
        .await
        .expect("limited");
    assert_eq!(limited.len(), 2, "a list stops at its limit");

    let counts = admin
        .count(&in_namespace(Query::all()), &mut |_| {})
        .await
        .expect("count");
    assert_eq!(
        (counts.in_progress, counts.abandoned, counts.completed),
        (2, 1, 1),
        "{counts:?}"
    );
    assert!(
        counts.oldest_abandoned_ms.is_some_and(|age| age >= 300),
        "{counts:?}"
    );
    let completed_only = admin
        .count(
            &in_namespace(Query::all().status(Status::Completed)),
            &mut |_| {},
        )
        .await
        .expect("count completed");
    assert_eq!(completed_only.total(), 1);

    let ops = Actor::new("ops@example", "INC-25 drill");
    // Release, fenced to the record as listed: applied once, then absent.
    let listed = stuck[0].clone();
    assert_eq!(
        admin
            .act(&abandoned, Fence::of(&listed), &ops, Step::Release)
            .await
            .expect("release"),
        Acted::Applied
    );
    assert!(store.get(&abandoned).await.expect("get").is_none());
    assert!(matches!(
        admin
            .act(&abandoned, Fence::of(&listed), &ops, Step::Release)
            .await
            .expect("again"),
        Acted::Refused {
            refusal: FenceRefusal::Absent,
            current: None
        }
    ));
    // The next claim of the released key runs again, as a first attempt.
    let again = store
        .claim(ClaimRequest {
            key: &abandoned,
            namespace: &namespace,
            fingerprint: &Fingerprint::of_bytes(b"A"),
            lease: long,
            claim_id: ClaimId::random(),
            mechanism: Some(Mechanism::Request),
            key_derivation: None,
        })
        .await
        .expect("claim again");
    assert!(
        matches!(again, Claim::Acquired(lease) if lease.attempt == 1 && !lease.took_over),
        "{again:?}"
    );

    // A record that moved on since it was listed (its owner's keep-alive ran) is refused.
    let before = store.get(&running).await.expect("get").expect("running");
    tokio::time::sleep(Duration::from_millis(5)).await;
    touch(&store, &running, before.token, long)
        .await
        .expect("touch");
    let refused = admin
        .act(&running, Fence::of(&before), &ops, Step::Release)
        .await
        .expect("release");
    assert!(
        matches!(&refused, Acted::Refused { refusal: FenceRefusal::MovedOn, current: Some(now) } if now.state == RecordState::InProgress),
        "{refused:?}"
    );
    assert!(
        store.get(&running).await.expect("get").is_some(),
        "B is untouched"
    );
    // Resume, fenced: the live lease ends now, and the next claim takes the key over (on a
    // store that keeps a run's checkpoints, after them).
    let current = store.get(&running).await.expect("get").expect("running");
    assert_eq!(
        admin
            .act(&running, Fence::of(&current), &ops, Step::Resume)
            .await
            .expect("resume"),
        Acted::Applied
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let claim = store
            .claim(ClaimRequest {
                key: &running,
                namespace: &namespace,
                fingerprint: &current.fingerprint,
                lease: long,
                claim_id: ClaimId::random(),
                mechanism: Some(Mechanism::Request),
                key_derivation: None,
            })
            .await
            .expect("claim after resume");
        match claim {
            Claim::Acquired(_) => break,
            Claim::InProgress { .. } if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            other => panic!("a resumed key is taken over, got {other:?}"),
        }
    }
    // Release needs an in-progress record.
    let completed_record = store.get(&done).await.expect("get").expect("done");
    assert!(matches!(
        admin
            .act(&done, Fence::of(&completed_record), &ops, Step::Release)
            .await
            .expect("release"),
        Acted::Refused {
            refusal: FenceRefusal::NotInProgress,
            ..
        }
    ));

    // Complete by hand: duplicates then replay the operator's outcome.
    let record = store.get(&by_hand).await.expect("get").expect("D");
    let manual = Outcome::new(200, "reconciled by hand");
    assert_eq!(
        admin
            .act(
                &by_hand,
                Fence::of(&record),
                &ops,
                Step::Complete(&manual, long)
            )
            .await
            .expect("complete"),
        Acted::Applied
    );
    let replay = store
        .claim(ClaimRequest {
            key: &by_hand,
            namespace: &namespace,
            fingerprint: &Fingerprint::of_bytes(b"D"),
            lease: long,
            claim_id: ClaimId::random(),
            mechanism: Some(Mechanism::Request),
            key_derivation: None,
        })
        .await
        .expect("claim D");
    assert_eq!(replay, Claim::Completed(manual.clone()));

    // Delete, fenced by the token: a completed record goes, and its key runs again.
    assert_eq!(
        admin
            .act(&done, Fence::of(&completed_record), &ops, Step::Delete)
            .await
            .expect("delete"),
        Acted::Applied
    );
    assert!(store.get(&done).await.expect("get").is_none());

    // Reconciliation: each key's record, in order; an unknown key has none.
    let unknown = scope.storage_key_for(Mechanism::Request, "never-sent");
    let reconciled = admin
        .reconcile(&[by_hand, unknown, running])
        .await
        .expect("reconcile");
    assert_eq!(reconciled.len(), 3);
    let first = reconciled[0].as_ref().expect("D");
    assert_eq!(first.outcome.as_ref().map(|o| o.status), Some(200));
    assert!(reconciled[1].is_none());
    assert_eq!(
        reconciled[2].as_ref().map(|r| r.state),
        Some(RecordState::InProgress)
    );

    // Every action was audited: who, why, what, and the record as it was.
    let entries = audit.entries();
    let actions: Vec<(Action, bool)> = entries.iter().map(|e| (e.action, e.applied)).collect();
    assert_eq!(
        actions,
        vec![
            (Action::Release, true),
            (Action::Release, false),
            (Action::Release, false),
            (Action::Resume, true),
            (Action::Release, false),
            (Action::Complete, true),
            (Action::Delete, true),
        ]
    );
    assert!(
        entries
            .iter()
            .all(|e| e.actor == "ops@example" && e.reason == "INC-25 drill")
    );
    assert_eq!(
        entries[0].key_hash.as_deref(),
        Some(abandoned.to_hex().as_str())
    );
    assert_eq!(
        entries[0].was.as_ref().map(|was| was.state),
        Some(Status::Abandoned)
    );
    assert_eq!(entries[2].detail, "moved_on");

    // Purge with a JSON lines archive: the expired record is copied, then deleted; live
    // records stay.
    let expired = completed(
        &store,
        &scope,
        "E",
        &Outcome::new(200, "old"),
        Duration::from_millis(50),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let lines = SharedBuffer::default();
    let mut archive = Archive::JsonLines(Box::new(lines.clone()));
    let report = admin
        .purge(
            Some(&namespace),
            &mut archive,
            Cursor::start(),
            &ops,
            &mut |_| {},
        )
        .await
        .expect("purge");
    assert!(
        store.get(&expired).await.expect("get").is_none(),
        "E expired"
    );
    if !expires_natively {
        assert_eq!(report.purged, 1, "{report:?}");
        let text = lines.text();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.contains(&expired.to_hex()), "{text}");
        assert!(
            text.contains("\"body_base64\":\"b2xk\""),
            "the archive keeps the body: {text}"
        );
    }
    for live in [abandoned, running, by_hand, other] {
        assert!(
            store.get(&live).await.expect("get").is_some(),
            "a live record stays"
        );
    }
    let purge_entry = audit.entries().pop().expect("purge audited");
    assert_eq!(purge_entry.action, Action::Purge);
    assert_eq!(purge_entry.namespace.as_deref(), Some(namespace.as_str()));
}

fn keys(records: &[idempotency_core::Record]) -> Vec<StorageKey> {
    records.iter().map(|record| record.key).collect()
}
