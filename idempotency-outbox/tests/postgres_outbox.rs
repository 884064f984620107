//! The outbox table on a real PostgreSQL (`DATABASE_URL`): enqueue in the business transaction,
//! claims (SKIP LOCKED, leases, fencing, ordering per aggregate), dead and revive, purging. No
//! broker involved.
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use idempotency_core::sql::outbox::OutboxTable;
use support::{enqueue_committed, fresh_outbox, message, table};

/// A message exists exactly when its transaction committed; one id is enqueued once.
#[tokio::test]
async fn an_enqueue_commits_and_rolls_back_with_its_transaction() {
    let Some(outbox) = fresh_outbox().await else {
        return;
    };
    let first = message("T1", "coupons");
    let mut tx = outbox.pool().begin().await.unwrap();
    assert!(outbox.enqueue(&mut tx, &first).await.unwrap());
    tx.rollback().await.unwrap();
    assert_eq!(outbox.counts().await.unwrap().pending, 0);

    let mut tx = outbox.pool().begin().await.unwrap();
    assert!(outbox.enqueue(&mut tx, &first).await.unwrap());
    tx.commit().await.unwrap();
    let mut tx = outbox.pool().begin().await.unwrap();
    assert!(
        !outbox.enqueue(&mut tx, &first).await.unwrap(),
        "one id, one message"
    );
    tx.commit().await.unwrap();
    assert_eq!(outbox.counts().await.unwrap().pending, 1);
    assert_eq!(outbox.dead(10).await.unwrap(), []);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_claims_are_disjoint() {
    let Some(outbox) = fresh_outbox().await else {
        return;
    };
    enqueue_committed(&outbox, &table::numbered("R", 300)).await;
    table::racing_claims_are_disjoint(&outbox, 300).await;
}

#[tokio::test]
async fn aggregates_go_out_in_order() {
    let Some(outbox) = fresh_outbox().await else {
        return;
    };
    enqueue_committed(&outbox, &table::ordered_messages()).await;
    table::aggregates_go_out_in_order(&outbox).await;
}

#[tokio::test]
async fn a_lease_holds_then_fences() {
    let Some(outbox) = fresh_outbox().await else {
        return;
    };
    enqueue_committed(&outbox, &table::numbered("L", 2)).await;
    table::a_lease_holds_then_fences(&outbox).await;
}

#[tokio::test]
async fn a_renewal_keeps_the_claim() {
    let Some(outbox) = fresh_outbox().await else {
        return;
    };
    enqueue_committed(&outbox, &table::numbered("E", 2)).await;
    table::a_renewal_keeps_the_claim(&outbox).await;
}

#[tokio::test]
async fn refusals_go_dead_and_revive() {
    let Some(outbox) = fresh_outbox().await else {
        return;
    };
    enqueue_committed(&outbox, &table::numbered("D", 1)).await;
    table::refusals_go_dead_and_revive(&outbox).await;
}

#[tokio::test]
async fn sent_messages_are_purged() {
    let Some(outbox) = fresh_outbox().await else {
        return;
    };
    enqueue_committed(&outbox, &table::numbered("P", 5)).await;
    table::sent_messages_are_purged(&outbox).await;
}

#[tokio::test]
async fn sent_messages_are_archived_once() {
    let Some(outbox) = fresh_outbox().await else {
        return;
    };
    enqueue_committed(&outbox, &table::numbered("A", 6)).await;
    let pool = outbox.pool().clone();
    table::sent_messages_are_archived_once(&outbox, |table| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar(&format!(
                "SELECT id FROM \"{table}\" WHERE archived_at IS NOT NULL"
            ))
            .fetch_all(&pool)
            .await
            .unwrap()
        }
    })
    .await;
}

/// The dedup record (`TxStore`) and the message commit or roll back together: a callback killed
/// before its commit leaves neither, the retry claims and enqueues, and a duplicate replays the
/// record without enqueueing anything.
#[tokio::test]
async fn the_dedup_record_and_the_message_commit_together() {
    use idempotency_core::sql::{PostgresStore, TxClaim, TxStore};
    use idempotency_core::{Fingerprint, IdempotencyKey, Outcome, Scope};

    let Some(outbox) = fresh_outbox().await else {
        return;
    };
    let store = PostgresStore::new(outbox.pool().clone())
        .with_table_name(&support::unique("dedup"))
        .unwrap();
    store.migrate().await.unwrap();
    let (scope, key) = (
        Scope::new("pay.callback"),
        IdempotencyKey::parse("T1").unwrap(),
    );
    let fingerprint = Fingerprint::of_bytes(b"T1 paid");
    let grant = message("T1", "coupons");

    // A callback that enqueues once its claim executes, committing or not.
    let callback = |commit: bool| {
        let (store, outbox, scope, key, grant) = (&store, &outbox, &scope, &key, &grant);
        async move {
            let mut tx = store.begin().await.unwrap();
            match store
                .claim_in_tx(&mut tx, scope, key, &fingerprint)
                .await
                .unwrap()
            {
                TxClaim::Execute(lease) => {
                    assert!(outbox.enqueue(&mut tx, grant).await.unwrap());
                    let outcome = Outcome::new(200, "granted");
                    store
                        .complete_in_tx(&mut tx, lease, &outcome)
                        .await
                        .unwrap();
                    if commit {
                        tx.commit().await.unwrap();
                    } else {
                        drop(tx); // the process died: rolled back
                    }
                    "executed"
                }
                TxClaim::Replay(_) => "replayed",
                other => panic!("unexpected {other:?}"),
            }
        }
    };
    assert_eq!(callback(false).await, "executed");
    assert_eq!(
        outbox.counts().await.unwrap().pending,
        0,
        "died before its commit"
    );
    assert_eq!(callback(true).await, "executed");
    for _ in 0..5 {
        assert_eq!(callback(true).await, "replayed");
    }
    assert_eq!(outbox.counts().await.unwrap().pending, 1);
}
