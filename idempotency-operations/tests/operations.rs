//! The operations suite (list, count, fenced and audited actions, reconciliation, purge with
//! archive) on the memory store. Redis and the SQL stores run it in their own crates' tests.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;

use idempotency_core::MemoryStore;
use idempotency_test::operations_suite;

#[tokio::test]
async fn operations_on_the_memory_store() {
    operations_suite(Arc::new(MemoryStore::new()), 3, false).await;
}

/// The gauges of a namespace, from a count: records per state and the oldest abandoned age.
#[test]
fn gauges_from_a_count() {
    use idempotency_core::Scope;
    use idempotency_core::metrics::{OLDEST_ABANDONED, RECORDS};
    use idempotency_operations::{Admin, TracingAudit};
    use idempotency_test::{claimed, unique_namespace};
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use std::time::Duration;

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let namespace = unique_namespace("gauges");
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let store = Arc::new(MemoryStore::new());
            let scope = Scope::new(namespace.clone());
            claimed(&store, &scope, "A", Duration::from_millis(1)).await;
            claimed(&store, &scope, "B", Duration::from_millis(1)).await;
            claimed(&store, &scope, "C", Duration::from_secs(60)).await;
            tokio::time::sleep(Duration::from_millis(1100)).await;
            assert_eq!(store.len(), 3);
            let admin = Admin::new(store, TracingAudit);
            let counts = admin.publish_gauges(Some(&namespace)).await.unwrap();
            assert_eq!((counts.in_progress, counts.abandoned), (1, 2));
        })
    });
    let gauges: Vec<(String, Vec<String>, f64)> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| match value {
            DebugValue::Gauge(value) => Some((
                key.key().name().to_owned(),
                key.key()
                    .labels()
                    .map(|label| label.value().to_owned())
                    .collect(),
                value.into_inner(),
            )),
            _ => None,
        })
        .collect();
    let gauge = |name: &str, state: Option<&str>| {
        gauges
            .iter()
            .find(|(n, labels, _)| {
                n == name
                    && labels[0] == namespace
                    && state.is_none_or(|state| labels.get(1).map(String::as_str) == Some(state))
            })
            .map(|(.., value)| *value)
    };
    assert_eq!(gauge(RECORDS, Some("abandoned")), Some(2.0));
    assert_eq!(gauge(RECORDS, Some("in_progress")), Some(1.0));
    assert_eq!(gauge(RECORDS, Some("completed")), Some(0.0));
    assert!(
        gauge(OLDEST_ABANDONED, None).is_some_and(|age| age >= 1.0),
        "{gauges:?}"
    );
}

/// A purge of the memory store honours the batch size (`--batch`), not a shard per batch, and
/// resumes from the cursor a stopped purge reported: 1 000 expired records (about 16 per shard) in
/// batches of 5,
/// one batch per call, with live records claimed between the calls; every expired record goes,
/// no live one.
#[tokio::test]
async fn memory_purge_batches_are_bounded_and_resumable() {
    use idempotency_core::{Outcome, Scope};
    use idempotency_operations::{Actor, Admin, Archive, Cursor, Progress};
    use idempotency_test::{KeptAudit, claimed, completed, unique_namespace};
    use std::time::Duration;

    let store = Arc::new(MemoryStore::new());
    let scope = Scope::new(unique_namespace("purge-batch"));
    let outcome = Outcome::new(200, "ok");
    for i in 0..1_000 {
        completed(
            &*store,
            &scope,
            &format!("old-{i}"),
            &outcome,
            Duration::from_millis(1),
        )
        .await;
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    let admin = Admin::from_shared(store.clone(), Arc::new(KeptAudit::default())).with_batch(5);
    let actor = Actor::new("test", "bounded purge");
    let (mut cursor, mut purged, mut calls, mut live) = (Cursor::start(), 0, 0, 0);
    loop {
        let mut largest = 0;
        let mut progress = |p: &Progress| largest = largest.max(p.examined);
        let report = admin
            .purge_batches(
                Some(scope.namespace()),
                &mut Archive::None,
                cursor,
                1,
                &actor,
                &mut progress,
            )
            .await
            .unwrap();
        assert_eq!(report.batches, 1);
        assert!(report.examined <= 5, "a batch examined {}", report.examined);
        assert!(largest <= 5);
        purged += report.purged;
        calls += 1;
        // Traffic between the batches: live records the purge must leave.
        claimed(
            &*store,
            &scope,
            &format!("live-{calls}"),
            Duration::from_secs(600),
        )
        .await;
        live += 1;
        match report.next {
            Some(next) => cursor = next,
            None => break,
        }
    }
    assert_eq!(purged, 1_000);
    assert!(calls >= 1_000 / 5, "{calls} calls");
    assert_eq!(store.len(), live, "only the live records are left");
}
