//! The outbox table on a real SQLite (a database file per test): enqueue in the business transaction,
//! claims (one writer at a time, leases, fencing, ordering per aggregate), dead and revive, purging. No
//! broker involved.
#![cfg(feature = "sqlite")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use idempotency_core::sql::outbox::OutboxTable;
use support::{enqueue_committed_sqlite, fresh_sqlite, message, table};

/// A message exists exactly when its transaction committed; one id is enqueued once.
#[tokio::test]
async fn an_enqueue_commits_and_rolls_back_with_its_transaction() {
    let Some(outbox) = fresh_sqlite().await else {
        return;
    };
    let first = message("T1", "coupons");
    let mut tx = outbox.pool().begin_with("BEGIN IMMEDIATE").await.unwrap();
    assert!(outbox.enqueue(&mut tx, &first).await.unwrap());
    tx.rollback().await.unwrap();
    assert_eq!(outbox.counts().await.unwrap().pending, 0);

    let mut tx = outbox.pool().begin_with("BEGIN IMMEDIATE").await.unwrap();
    assert!(outbox.enqueue(&mut tx, &first).await.unwrap());
    tx.commit().await.unwrap();
    let mut tx = outbox.pool().begin_with("BEGIN IMMEDIATE").await.unwrap();
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
    let Some(outbox) = fresh_sqlite().await else {
        return;
    };
    enqueue_committed_sqlite(&outbox, &table::numbered("R", 300)).await;
    table::racing_claims_are_disjoint(&outbox, 300).await;
}

#[tokio::test]
async fn aggregates_go_out_in_order() {
    let Some(outbox) = fresh_sqlite().await else {
        return;
    };
    enqueue_committed_sqlite(&outbox, &table::ordered_messages()).await;
    table::aggregates_go_out_in_order(&outbox).await;
}

#[tokio::test]
async fn a_lease_holds_then_fences() {
    let Some(outbox) = fresh_sqlite().await else {
        return;
    };
    enqueue_committed_sqlite(&outbox, &table::numbered("L", 2)).await;
    table::a_lease_holds_then_fences(&outbox).await;
}

#[tokio::test]
async fn a_renewal_keeps_the_claim() {
    let Some(outbox) = fresh_sqlite().await else {
        return;
    };
    enqueue_committed_sqlite(&outbox, &table::numbered("E", 2)).await;
    table::a_renewal_keeps_the_claim(&outbox).await;
}

#[tokio::test]
async fn refusals_go_dead_and_revive() {
    let Some(outbox) = fresh_sqlite().await else {
        return;
    };
    enqueue_committed_sqlite(&outbox, &table::numbered("D", 1)).await;
    table::refusals_go_dead_and_revive(&outbox).await;
}

#[tokio::test]
async fn sent_messages_are_purged() {
    let Some(outbox) = fresh_sqlite().await else {
        return;
    };
    enqueue_committed_sqlite(&outbox, &table::numbered("P", 5)).await;
    table::sent_messages_are_purged(&outbox).await;
}

#[tokio::test]
async fn sent_messages_are_archived_once() {
    let Some(outbox) = fresh_sqlite().await else {
        return;
    };
    enqueue_committed_sqlite(&outbox, &table::numbered("A", 6)).await;
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
