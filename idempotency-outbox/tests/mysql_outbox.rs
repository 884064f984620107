//! The outbox table on a real MySQL/MariaDB (`MYSQL_URL`): enqueue in the business transaction,
//! claims (SKIP LOCKED and the plain row-lock fallback, leases, fencing, ordering per aggregate), dead and revive, purging. No
//! broker involved.
#![cfg(feature = "mysql")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use idempotency_outbox::Outbox;
use sqlx::MySql;
use support::TestOutbox;

support::table::table_suite!(Outbox<MySql>);

/// Servers without SKIP LOCKED (MySQL before 8.0.1, MariaDB before 10.6) claim with plain row
/// locks: racing claimers wait for each other's claim, then find its rows leased; still
/// disjoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_claims_are_disjoint_without_skip_locked() {
    let Some(outbox) = Outbox::<MySql>::fresh().await else {
        return;
    };
    let outbox = outbox.without_skip_locked();
    assert!(!outbox.skips_locked().await.unwrap());
    support::enqueue_committed(&outbox, &table::numbered("R", 300)).await;
    table::racing_claims_are_disjoint(&outbox).await;
}

/// The server's version decides (this test server's answer is printed).
#[tokio::test]
async fn skip_locked_follows_the_server_version() {
    let Some(outbox) = Outbox::<MySql>::fresh().await else {
        return;
    };
    let version: String = sqlx::query_scalar("SELECT VERSION()")
        .fetch_one(outbox.pool())
        .await
        .unwrap();
    let skips = outbox.skips_locked().await.unwrap();
    println!("{version}: SKIP LOCKED {skips}");
    let numbers: Vec<u32> = version
        .split(|c: char| !c.is_ascii_digit())
        .take(2)
        .map(|n| n.parse().unwrap())
        .collect();
    if version.contains("MariaDB") {
        assert_eq!(skips, (numbers[0], numbers[1]) >= (10, 6));
    } else {
        assert_eq!(skips, numbers[0] >= 8);
    }
}
