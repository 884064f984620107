//! The dedup table's iron rule: **the dedup record and the business change live in the same
//! database and commit in the same transaction**.
//!
//! The post-mortem's second trap: the coupon service had its own database, the dedup table
//! lived in the callback service's database, and no transaction spans two databases. Whatever
//! the order of the two commits, a crash between them breaks exactly-once:
//!
//! - record first, coupon second: the record says "done", the coupon was never written; every
//!   retry is answered as a duplicate, the customer never gets the coupon (a dangling record);
//! - coupon first, record second: the coupon is written, the record is not; the retry runs
//!   again and grants a second coupon.
//!
//! This program runs the same payment callback three ways on SQLite files in a temporary
//! directory and prints what each leaves behind after a crash and the gateway's retries:
//!
//! ```text
//! cargo run -p incident-demo --features sqlite --bin cross_db_callback
//! ```
//!
//! Only the first (same database, [`TxStore::claim_in_tx`] + [`TxStore::complete_in_tx`]) grants
//! exactly one coupon. If the business data must stay in another database, move the dedup
//! record there (or drive the business change by a state transition on its own row, see
//! `idempotency_sql::Transition`), instead of trying to pair two commits.
//!
//! When the coupons belong to another service with its own database, the fourth way is the one
//! that works across databases: a transactional outbox (`idempotency_outbox::Outbox`, the
//! grant enqueued in the callback's transaction), a relay (`idempotency-outbox`), and the coupon
//! service claiming the message id in its own transaction. `outbox_demo` (feature `outbox`)
//! runs it through a crash at every boundary.
#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};

use idempotency_core::{Fingerprint, IdempotencyKey, Outcome, Scope, StoreError};
use idempotency_sql::{SqliteStore, TxClaim, TxStore};
use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};

/// Where the callback "crashes" (the process dies, the transaction in flight is lost).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Crash {
    /// No crash.
    Never,
    /// Between the first and the second commit (with one database: just before its commit).
    BetweenCommits,
}

/// Which layout the callback uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// Dedup record and coupons in one database, one transaction.
    SameDatabase,
    /// Dedup record committed in database A, then the coupon in database B.
    RecordFirst,
    /// Coupon committed in database B, then the dedup record in database A.
    CouponFirst,
}

/// Errors of this example.
#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Sql(#[from] sqlx::Error),
    #[error(transparent)]
    Key(#[from] idempotency_core::KeyError),
    #[error("the process crashed between the two commits")]
    Crashed,
}

/// The callback service: a dedup store in database A, coupons in database `coupons`.
struct Service {
    store: SqliteStore,
    dedup_db: SqlitePool,
    coupon_db: SqlitePool,
}

async fn open(path: &Path) -> Result<SqlitePool, sqlx::Error> {
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal);
    SqlitePool::connect_with(options).await
}

impl Service {
    /// `dedup` and `coupons` may be the same file (the correct layout) or two files.
    async fn open(dedup: &Path, coupons: &Path) -> Result<Self, Error> {
        let dedup_db = open(dedup).await?;
        let coupon_db = if dedup == coupons {
            dedup_db.clone()
        } else {
            open(coupons).await?
        };
        let store = SqliteStore::new(dedup_db.clone());
        store.migrate().await?;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS coupons (id INTEGER PRIMARY KEY, trade_no TEXT NOT NULL)",
        )
        .execute(&coupon_db)
        .await?;
        Ok(Self {
            store,
            dedup_db,
            coupon_db,
        })
    }

    async fn coupons(&self, trade_no: &str) -> Result<i64, Error> {
        let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM coupons WHERE trade_no = ?")
            .bind(trade_no)
            .fetch_one(&self.coupon_db)
            .await?;
        Ok(n)
    }

    /// Handles one delivery of the payment callback for `trade_no`. Returns whether this
    /// delivery granted the coupon (`false`: answered as a duplicate).
    async fn on_pay_callback(
        &self,
        layout: Layout,
        trade_no: &str,
        crash: Crash,
    ) -> Result<bool, Error> {
        let scope = Scope::new("pay.callback");
        let key = IdempotencyKey::parse(trade_no)?;
        let fingerprint = Fingerprint::of_bytes(trade_no.as_bytes());
        let granted = Outcome::new(200, "coupon granted");
        let grant = "INSERT INTO coupons (trade_no) VALUES (?)";

        let mut dedup_tx = self.dedup_db.begin().await?;
        let lease = match self
            .store
            .claim_in_tx(&mut dedup_tx, &scope, &key, &fingerprint)
            .await?
        {
            TxClaim::Execute(lease) => lease,
            // Duplicate: answer success (so the gateway stops retrying), grant nothing.
            _ => return Ok(false),
        };
        match layout {
            Layout::SameDatabase => {
                // One transaction: the coupon and the record commit together or not at all.
                sqlx::query(grant)
                    .bind(trade_no)
                    .execute(&mut *dedup_tx)
                    .await?;
                self.store
                    .complete_in_tx(&mut dedup_tx, lease, &granted)
                    .await?;
                if crash == Crash::BetweenCommits {
                    // Crash before the one commit: both writes are rolled back together.
                    drop(dedup_tx);
                    return Err(Error::Crashed);
                }
                dedup_tx.commit().await?;
            }
            Layout::RecordFirst => {
                self.store
                    .complete_in_tx(&mut dedup_tx, lease, &granted)
                    .await?;
                dedup_tx.commit().await?;
                if crash == Crash::BetweenCommits {
                    return Err(Error::Crashed);
                }
                sqlx::query(grant)
                    .bind(trade_no)
                    .execute(&self.coupon_db)
                    .await?;
            }
            Layout::CouponFirst => {
                sqlx::query(grant)
                    .bind(trade_no)
                    .execute(&self.coupon_db)
                    .await?;
                if crash == Crash::BetweenCommits {
                    // The dedup transaction dies with the process: rolled back.
                    drop(dedup_tx);
                    return Err(Error::Crashed);
                }
                self.store
                    .complete_in_tx(&mut dedup_tx, lease, &granted)
                    .await?;
                dedup_tx.commit().await?;
            }
        }
        Ok(true)
    }
}

/// Delivers the callback six times (the gateway's retries), the first delivery crashing
/// between commits where there are two; returns how many coupons exist afterwards.
async fn six_deliveries(dir: &Path, layout: Layout) -> Result<i64, Error> {
    let dedup = dir.join(format!("{layout:?}-dedup.db"));
    let coupons = if layout == Layout::SameDatabase {
        dedup.clone()
    } else {
        dir.join(format!("{layout:?}-coupons.db"))
    };
    let service = Service::open(&dedup, &coupons).await?;
    let trade_no = "T202405170001";
    for delivery in 0..6 {
        let crash = if delivery == 0 {
            Crash::BetweenCommits
        } else {
            Crash::Never
        };
        match service.on_pay_callback(layout, trade_no, crash).await {
            Ok(_) | Err(Error::Crashed) => {}
            Err(other) => return Err(other),
        }
    }
    service.coupons(trade_no).await
}

fn scratch_dir() -> PathBuf {
    let mut bytes = [0u8; 8];
    for (index, byte) in std::process::id().to_be_bytes().iter().enumerate() {
        bytes[index] = *byte;
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    bytes[4..].copy_from_slice(&nanos.to_be_bytes());
    std::env::temp_dir().join(format!(
        "cross_db_callback_{:016x}",
        u64::from_be_bytes(bytes)
    ))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = scratch_dir();
    std::fs::create_dir_all(&dir)?;
    println!("six deliveries of one payment callback, the first one crashing between commits:");
    for (layout, verdict) in [
        (
            Layout::SameDatabase,
            "correct: record and coupon in one transaction",
        ),
        (
            Layout::RecordFirst,
            "record in A, coupon in B: a dangling record, the coupon is lost",
        ),
        (
            Layout::CouponFirst,
            "coupon in B, record in A: the retry grants a second coupon",
        ),
    ] {
        let coupons = six_deliveries(&dir, layout).await?;
        println!("  {layout:?}: {coupons} coupon(s) -- {verdict}");
    }
    println!(
        "  Outbox: the fourth way, for a coupon service with its own database (the grant \
         enqueued in the callback's transaction, the message id deduped in the coupon's): \
         not run here, it needs PostgreSQL and RabbitMQ; \
         cargo run -p incident-demo --features outbox --bin outbox_demo"
    );
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn run(layout: Layout) -> i64 {
        let dir = scratch_dir().with_extension(format!("{layout:?}"));
        std::fs::create_dir_all(&dir).unwrap();
        let coupons = six_deliveries(&dir, layout).await.unwrap();
        std::fs::remove_dir_all(&dir).ok();
        coupons
    }

    /// Same database, same transaction: the crashed first delivery left nothing; the first
    /// retry grants, the other four are duplicates. Exactly one coupon.
    #[tokio::test]
    async fn same_database_grants_exactly_once() {
        assert_eq!(run(Layout::SameDatabase).await, 1);
    }

    /// Record in database A committed, crash before the coupon in B: every retry is a
    /// "duplicate", the coupon never arrives.
    #[tokio::test]
    async fn record_in_another_database_loses_the_coupon() {
        assert_eq!(run(Layout::RecordFirst).await, 0);
    }

    /// Coupon in B committed, crash before the record in A: the retry runs again.
    #[tokio::test]
    async fn coupon_in_another_database_is_granted_twice() {
        assert_eq!(run(Layout::CouponFirst).await, 2);
    }
}
