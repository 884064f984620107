//! Operations on a SQL store: the shared suite, then what only SQL has (an archive table, an
//! audit table), and a purge while live traffic claims.

use std::sync::Arc;
use std::time::Duration;

use idempotency_core::{Outcome, Scope, Store};
use idempotency_operations::{
    Acted, Actor, Admin, Archive, Cursor, Fence, Operations, Query, Step, TracingAudit,
};
use idempotency_sql::{SqlAudit, SqlStore};
use idempotency_test::{claimed, completed, operations_suite, unique_namespace};
use sqlx::Pool;

use super::{Dialect, unique_table};

/// Every operation on `store` (on a fresh table, migrated), its audit table and archive table.
pub async fn operations_on<DB>(store: SqlStore<DB>, pool: Pool<DB>) -> Vec<String>
where
    DB: Dialect + idempotency_sql::Dialect,
    SqlStore<DB>: Operations,
{
    operations_suite(store.clone(), 3, false).await;

    // The archive table: expired records copied and deleted in one transaction per batch; a
    // second purge finds nothing more (restartable, nothing archived twice).
    let scope = Scope::new(unique_namespace("archive"));
    let namespace = scope.namespace().to_owned();
    for raw in ["X1", "X2", "X3", "X4", "X5"] {
        completed(
            &store,
            &scope,
            raw,
            &Outcome::new(200, raw),
            Duration::from_millis(10),
        )
        .await;
    }
    let live = claimed(&store, &scope, "live", Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The SQL count (three COUNT(*)s through the index) agrees with a scan of the records.
    let in_archive_namespace = Query::all().namespace(namespace.clone());
    let fast = store
        .count_fast(&in_archive_namespace)
        .await
        .unwrap()
        .expect("SQL stores count without a scan");
    let mut scanned = idempotency_operations::Counts::default();
    let now = std::time::SystemTime::now();
    for record in Admin::new(store.clone(), TracingAudit)
        .list(&in_archive_namespace, 100, &mut |_| {})
        .await
        .unwrap()
    {
        scanned.add(&record, now);
    }
    assert_eq!(
        (fast.in_progress, fast.abandoned, fast.completed),
        (scanned.in_progress, scanned.abandoned, scanned.completed)
    );
    assert_eq!((fast.in_progress, fast.completed), (1, 5), "{fast:?}");
    let archive_table = unique_table("idem_archive");
    let audit_table = unique_table("idem_audit");
    let audit = SqlAudit::new(pool.clone(), &audit_table).unwrap();
    audit.migrate().await.unwrap();
    let admin = Admin::new(store.clone(), audit.clone()).with_batch(2);
    let ops = Actor::new("ops@example", "archive drill");
    let mut archive = Archive::Table(archive_table.clone());
    let mut batches = 0;
    let report = admin
        .purge(
            Some(&namespace),
            &mut archive,
            Cursor::start(),
            &ops,
            &mut |_| batches += 1,
        )
        .await
        .unwrap();
    assert_eq!(report.purged, 5, "{report:?}");
    assert!(batches >= 3, "batches of 2: {batches}");
    let archived = format!("SELECT COUNT(*) FROM {archive_table} WHERE namespace = '{namespace}'");
    assert_eq!(DB::scalar(&pool, &archived).await, 5);
    let again = admin
        .purge(
            Some(&namespace),
            &mut archive,
            Cursor::start(),
            &ops,
            &mut |_| {},
        )
        .await
        .unwrap();
    assert_eq!(again.purged, 0);
    assert_eq!(
        DB::scalar(&pool, &archived).await,
        5,
        "nothing archived twice"
    );
    assert!(
        store.get(&live).await.unwrap().is_some(),
        "the live record stays"
    );

    // The audit table: one row per action, the record as it was, never a raw key.
    let record = store.get(&live).await.unwrap().unwrap();
    assert_eq!(
        admin
            .act(&live, Fence::of(&record), &ops, Step::Release)
            .await
            .unwrap(),
        Acted::Applied
    );
    let rows = format!(
        "SELECT COUNT(*) FROM {audit_table} WHERE action = 'release' AND applied = 1 \
         AND key_hash = '{}' AND actor = 'ops@example' AND record LIKE '%in_progress%'",
        live.to_hex()
    );
    assert_eq!(DB::scalar(&pool, &rows).await, 1);
    let purges = format!("SELECT COUNT(*) FROM {audit_table} WHERE action = 'purge'");
    assert_eq!(DB::scalar(&pool, &purges).await, 2);
    vec![archive_table, audit_table]
}

/// A purge of `expired` records while `live` fresh keys are claimed concurrently: every live
/// record is still there afterwards, every expired one is gone.
pub async fn purge_beside_traffic<DB>(store: SqlStore<DB>, expired: usize, live: usize)
where
    DB: idempotency_sql::Dialect,
    SqlStore<DB>: Operations,
{
    let scope = Scope::new(unique_namespace("traffic"));
    let mut old = Vec::new();
    for index in 0..expired {
        let raw = format!("old-{index}");
        old.push(
            completed(
                &store,
                &scope,
                &raw,
                &Outcome::new(200, "x"),
                Duration::from_millis(1),
            )
            .await,
        );
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let store = Arc::new(store);
    let traffic = {
        let store = Arc::clone(&store);
        let scope = scope.clone();
        tokio::spawn(async move {
            let mut keys = Vec::new();
            for index in 0..live {
                let raw = format!("new-{index}");
                keys.push(claimed(&*store, &scope, &raw, Duration::from_secs(60)).await);
            }
            keys
        })
    };
    let admin = Admin::new(Arc::clone(&store), TracingAudit).with_batch(100);
    let report = admin
        .purge(
            Some(scope.namespace()),
            &mut Archive::None,
            Cursor::start(),
            &Actor::new("test", "purge beside traffic"),
            &mut |_| {},
        )
        .await
        .unwrap();
    let fresh = traffic.await.unwrap();
    assert_eq!(report.purged, expired as u64, "{report:?}");
    let counts = admin
        .count(&Query::all().namespace(scope.namespace()), &mut |_| {})
        .await
        .unwrap();
    assert_eq!(
        counts.in_progress, live as u64,
        "no live record was purged: {counts:?}"
    );
    assert_eq!(counts.completed, 0, "{counts:?}");
    for key in fresh.iter().take(20).chain(old.iter().take(20)) {
        let found = store.get(key).await.unwrap();
        assert_eq!(found.is_some(), fresh.contains(key));
    }
}

/// Purges, counts and listings judge expiry by the database's clock, as the store's leases and
/// TTLs do: `skewed` is a store on the same table as `store` whose database clock runs 3 h
/// ahead of the host's (the host clock is the same for both). Records completed for 1 h and
/// claimed for 1 h are live to `store`; to `skewed` the completed ones are expired and the
/// claimed ones abandoned past the 1 h grace, and it purges them all.
pub async fn judged_by_the_database_clock<DB>(store: SqlStore<DB>, skewed: SqlStore<DB>)
where
    DB: idempotency_sql::Dialect,
    SqlStore<DB>: Operations,
{
    let scope = Scope::new(unique_namespace("db-clock"));
    let hour = Duration::from_secs(3600);
    for raw in ["C1", "C2", "C3", "C4", "C5"] {
        completed(&store, &scope, raw, &Outcome::new(200, raw), hour).await;
    }
    for raw in ["P1", "P2", "P3"] {
        claimed(&store, &scope, raw, hour).await;
    }
    // What a store's operations see: counts (completed, in progress, abandoned), the oldest
    // abandoned age, how many `stuck` lists, then how many a purge deletes.
    let observe = async |store: SqlStore<DB>| {
        let admin = Admin::new(store, TracingAudit);
        let query = Query::all().namespace(scope.namespace());
        let counts = admin.count(&query, &mut |_| {}).await.unwrap();
        let stuck = Query {
            statuses: vec![idempotency_operations::Status::Abandoned],
            ..query
        };
        let stuck = admin.list(&stuck, 100, &mut |_| {}).await.unwrap().len();
        let actor = Actor::new("test", "the database's clock");
        let namespace = Some(scope.namespace());
        let report = admin
            .purge(
                namespace,
                &mut Archive::None,
                Cursor::start(),
                &actor,
                &mut |_| {},
            )
            .await
            .unwrap();
        let seen = (counts.completed, counts.in_progress, counts.abandoned);
        (seen, counts.oldest_abandoned_ms, stuck, report.purged)
    };
    // Live by the host's clock and by the store's database clock: nothing to purge.
    assert_eq!(observe(store).await, ((5, 3, 0), None, 0, 0));
    // 3 h later by the database's clock: abandoned past the grace and expired, all purged.
    let (seen, oldest, stuck, purged) = observe(skewed).await;
    assert_eq!((seen, stuck, purged), ((5, 0, 3), 3, 8));
    let oldest = oldest.unwrap();
    assert!(
        oldest >= 3 * 3_600_000 - 60_000,
        "aged by the database's clock: {oldest} ms"
    );
}

/// Where the audit table is in the store's database, an action and its audit row commit
/// together: while the audit table is gone (every entry fails), release, complete and delete
/// each fail and leave the record as it was; once it is back, the release applies and its row
/// is there. Returns the audit table, to drop.
pub async fn audit_is_atomic_with_the_action<DB>(store: SqlStore<DB>, pool: Pool<DB>) -> Vec<String>
where
    DB: Dialect + idempotency_sql::Dialect,
    SqlStore<DB>: Operations,
{
    let audit_table = unique_table("audit_atomic");
    let audit = SqlAudit::new(pool.clone(), &audit_table).unwrap();
    let scope = Scope::new(unique_namespace("atomic"));
    let key = claimed(&store, &scope, "stuck", Duration::from_secs(600)).await;
    let record = store.get(&key).await.unwrap().unwrap();
    let admin = Admin::new(store.clone(), audit.clone());
    let actor = Actor::new("oncall", "INC-9: a stuck callback");
    let outcome = Outcome::new(200, "settled by hand");
    let hour = Duration::from_secs(3600);

    // No audit table: the entry cannot be written, so no action may apply.
    for action in ["release", "complete", "delete"] {
        let fence = Fence::of(&record);
        let done = match action {
            "release" => admin.act(&key, fence, &actor, Step::Release).await,
            "complete" => {
                admin
                    .act(&key, fence, &actor, Step::Complete(&outcome, hour))
                    .await
            }
            _ => admin.act(&key, fence, &actor, Step::Delete).await,
        };
        let error = done.expect_err(action).to_string();
        assert!(error.contains("not applied"), "{action}: {error}");
        let now = store.get(&key).await.unwrap();
        assert_eq!(
            now.as_ref(),
            Some(&record),
            "{action} left the record as it was"
        );
    }

    audit.migrate().await.unwrap();
    let acted = admin
        .act(&key, Fence::of(&record), &actor, Step::Release)
        .await
        .unwrap();
    assert!(matches!(acted, Acted::Applied), "{acted:?}");
    assert!(store.get(&key).await.unwrap().is_none());
    let rows = format!(
        "SELECT COUNT(*) FROM {audit_table} WHERE action = 'release' AND applied = 1 AND \
         key_hash = '{}'",
        key.to_hex()
    );
    assert_eq!(DB::scalar(&pool, &rows).await, 1);
    vec![audit_table]
}

/// A table configured with a TTL (`with_table_ttl`, recorded by `migrate`) keeps every record
/// last written less than that long ago: a record completed with a shorter TTL, and an
/// abandoned claim past its grace, stay through `purge_expired` (the sweeper's) and the
/// operations' purge, also of a store on the table that set no TTL itself (another process,
/// the command line). A control table without one, written after them, is purged. Returns the
/// control table, to drop.
pub async fn purges_keep_the_table_ttl<DB>(store: SqlStore<DB>, _pool: Pool<DB>) -> Vec<String>
where
    DB: Dialect + idempotency_sql::Dialect,
    SqlStore<DB>: Operations,
{
    let hour = Duration::from_secs(3600);
    let configured = store.clone().with_table_ttl(hour);
    configured.migrate().await.unwrap();
    // Another process's store on the same table, configured with nothing: it reads the TTL.
    let unaware = store.with_abandoned_grace(Duration::ZERO);
    let control_table = unique_table("ttl_control");
    let control = unaware
        .clone()
        .with_table_name(&control_table)
        .unwrap()
        .with_abandoned_grace(Duration::ZERO);
    control.migrate().await.unwrap();
    assert_eq!(unaware.ttl_floor().await.unwrap(), Some(hour));
    assert_eq!(control.ttl_floor().await.unwrap(), None);

    let scope = Scope::new(unique_namespace("floor"));
    let mut kept = Vec::new();
    for table in [&unaware, &control] {
        let done = completed(
            table,
            &scope,
            "by-hand",
            &Outcome::new(200, "short"),
            Duration::from_millis(1),
        )
        .await;
        let crashed = claimed(table, &scope, "crashed", Duration::from_millis(1)).await;
        kept.push([done, crashed]);
    }
    // Waits for the event: the control table's records (written last) are purged, so every
    // record of the configured table is past its own expiry and grace too.
    let (mut rounds, mut purged) = (0, 0);
    while purged < 2 {
        purged += Store::purge_expired(&control, 100).await.unwrap();
        rounds += 1;
        assert!(rounds < 10_000, "the control table's records expire");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(Store::purge_expired(&unaware, 100).await.unwrap(), 0);
    assert_eq!(Store::purge_expired(&configured, 100).await.unwrap(), 0);
    let admin = Admin::new(unaware.clone(), TracingAudit);
    let report = admin
        .purge(
            Some(scope.namespace()),
            &mut Archive::None,
            Cursor::start(),
            &Actor::new("test", "floor"),
            &mut |_| {},
        )
        .await
        .unwrap();
    assert_eq!(report.purged, 0, "{report:?}");
    for key in &kept[0] {
        assert!(
            unaware.get(key).await.unwrap().is_some(),
            "younger than the table's TTL"
        );
    }
    vec![control_table]
}
