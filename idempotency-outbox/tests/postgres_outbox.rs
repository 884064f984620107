//! The outbox table on a real PostgreSQL (`DATABASE_URL`): enqueue in the business transaction,
//! claims (leases, fencing, ordering per aggregate), purging. No broker involved.
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use idempotency_core::sql::outbox::{ClaimBatch, OutboxTable};
use support::{enqueue_committed, fresh_outbox, message};

fn batch(claim: i64, limit: usize) -> ClaimBatch {
    ClaimBatch {
        limit,
        lease: Duration::from_secs(60),
        claim,
    }
}

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
    assert!(outbox.claim(batch(1, 10)).await.unwrap().is_empty());

    let mut tx = outbox.pool().begin().await.unwrap();
    assert!(outbox.enqueue(&mut tx, &first).await.unwrap());
    tx.commit().await.unwrap();

    let mut tx = outbox.pool().begin().await.unwrap();
    assert!(
        !outbox.enqueue(&mut tx, &first).await.unwrap(),
        "one id, one message"
    );
    tx.commit().await.unwrap();

    let claimed = outbox.claim(batch(2, 10)).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].message, first);
    assert_eq!((claimed[0].claim, claimed[0].attempts), (2, 0));
}

/// A claimed message is nobody else's until its lease ends; marks carrying another claim's token
/// change nothing.
#[tokio::test]
async fn a_claim_holds_its_messages_and_fences_other_marks() {
    let Some(outbox) = fresh_outbox().await else {
        return;
    };
    enqueue_committed(&outbox, &[message("A", "t"), message("B", "t")]).await;
    let mine = outbox
        .claim(ClaimBatch {
            limit: 1,
            lease: Duration::from_millis(300),
            claim: 7,
        })
        .await
        .unwrap();
    assert_eq!(mine.len(), 1);
    let theirs = outbox.claim(batch(8, 10)).await.unwrap();
    assert_eq!(theirs.len(), 1, "only the unclaimed message");
    assert_ne!(theirs[0].seq, mine[0].seq);

    // Claim 7's lease ends: claim 9 takes the message over, and claim 7's mark is stale.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let taken = outbox.claim(batch(9, 10)).await.unwrap();
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].seq, mine[0].seq);
    assert_eq!(outbox.mark_sent(7, &[mine[0].seq]).await.unwrap(), 0);
    assert_eq!(outbox.mark_sent(9, &[taken[0].seq]).await.unwrap(), 1);
    assert_eq!(outbox.counts().await.unwrap().sent, 1);
}

/// Messages of one aggregate go out one at a time, in enqueue order; other aggregates and
/// unordered messages are not held back.
#[tokio::test]
async fn messages_of_one_aggregate_are_claimed_in_order_one_at_a_time() {
    let Some(outbox) = fresh_outbox().await else {
        return;
    };
    let a = |n: u32| message(&format!("A{n}"), "t").ordered_by("order-A");
    let b1 = message("B1", "t").ordered_by("order-B");
    let free = message("F1", "t");
    enqueue_committed(&outbox, &[a(1), a(2), b1, a(3), free]).await;

    let mut delivered = Vec::new();
    for claim in 1..=10 {
        let claimed = outbox.claim(batch(claim, 10)).await.unwrap();
        if claimed.is_empty() {
            break;
        }
        let aggregates: Vec<_> = claimed
            .iter()
            .filter_map(|c| c.message.aggregate.clone())
            .collect();
        let mut unique = aggregates.clone();
        unique.dedup();
        assert_eq!(
            aggregates.len(),
            unique.len(),
            "one message per aggregate per claim"
        );
        let seqs: Vec<i64> = claimed.iter().map(|c| c.seq).collect();
        delivered.extend(claimed.into_iter().map(|c| c.message.key));
        assert_eq!(
            outbox.mark_sent(claim, &seqs).await.unwrap(),
            seqs.len() as u64
        );
    }
    let order_a: Vec<_> = delivered
        .iter()
        .filter(|k| k.starts_with('A'))
        .cloned()
        .collect();
    assert_eq!(order_a, ["A1", "A2", "A3"]);
    assert_eq!(delivered.len(), 5);
    assert_eq!(
        &delivered[..3],
        ["A1", "B1", "F1"],
        "the first claim takes one of each"
    );
    assert_eq!(outbox.counts().await.unwrap().sent, 5);
}

/// Sent messages past their retention are purged in bounded batches; pending ones never are.
#[tokio::test]
async fn sent_messages_are_purged_pending_ones_kept() {
    let Some(outbox) = fresh_outbox().await else {
        return;
    };
    let messages: Vec<_> = (0..5).map(|n| message(&format!("P{n}"), "t")).collect();
    enqueue_committed(&outbox, &messages).await;
    let claimed = outbox.claim(batch(1, 3)).await.unwrap();
    let seqs: Vec<i64> = claimed.iter().map(|c| c.seq).collect();
    assert_eq!(outbox.mark_sent(1, &seqs).await.unwrap(), 3);
    assert_eq!(
        outbox
            .purge_sent(Duration::from_secs(3600), 10)
            .await
            .unwrap(),
        0,
        "within retention"
    );
    assert_eq!(
        outbox.purge_sent(Duration::ZERO, 2).await.unwrap(),
        2,
        "bounded"
    );
    assert_eq!(outbox.purge_sent(Duration::ZERO, 10).await.unwrap(), 1);
    let counts = outbox.counts().await.unwrap();
    assert_eq!((counts.pending, counts.sent), (2, 0));
}
