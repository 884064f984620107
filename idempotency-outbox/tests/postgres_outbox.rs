//! The outbox table on a real PostgreSQL (`DATABASE_URL`): enqueue in the business transaction,
//! claims (SKIP LOCKED, leases, fencing, ordering per aggregate), dead and revive, purging. No
//! broker involved.
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use idempotency_outbox::Outbox;
use idempotency_outbox::table::OutboxTable;
use sqlx::Postgres;
use support::message;

support::table::table_suite!(Outbox<Postgres>);

/// The dedup record (`TxStore`) and the message commit or roll back together: a callback killed
/// before its commit leaves neither, the retry claims and enqueues, and a duplicate replays the
/// record without enqueueing anything.
#[tokio::test]
async fn the_dedup_record_and_the_message_commit_together() {
    use idempotency_core::{Fingerprint, IdempotencyKey, Outcome, Scope};
    use idempotency_sql::{PostgresStore, TxClaim, TxStore};

    let Some(outbox) = support::fresh_outbox().await else {
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
