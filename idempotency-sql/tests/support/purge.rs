//! Purges, listings, the sweeper and the owner's rollback under a storm of duplicates.

use super::*;
use idempotency_core::CompleteRequest;

/// Purge in bounded batches, and reconciliation listing by namespace, state and time.
pub async fn purge_batches_and_list<S: Store>(
    store: S,
    list: impl AsyncFn(&S, ListFilter) -> Vec<idempotency_core::Record>,
) {
    let namespace = format!("ns{}", &unique_key().to_hex()[..10]);
    let fp = Fingerprint::of_bytes(b"x");
    let started = std::time::SystemTime::now() - Duration::from_secs(1);
    let mut keys = Vec::new();
    for index in 0..7 {
        let key = unique_key();
        let Claim::Acquired(lease) = store
            .claim(ClaimRequest {
                key: &key,
                namespace: &namespace,
                fingerprint: &fp,
                lease: Duration::from_secs(30),
                claim_id: idempotency_core::ClaimId::random(),
                mechanism: None,
                key_derivation: None,
            })
            .await
            .unwrap()
        else {
            panic!("fresh key");
        };
        if index < 5 {
            store
                .complete(CompleteRequest {
                    key: &key,
                    token: lease.token,
                    outcome: &Outcome::new(200, "ok"),
                    ttl: Duration::from_millis(200),
                })
                .await
                .unwrap();
        }
        keys.push(key);
    }
    let all = list(&store, ListFilter::new(100).namespace(namespace.clone())).await;
    assert_eq!(all.len(), 7);
    assert!(all.windows(2).all(|w| w[0].updated_at <= w[1].updated_at));
    let running = list(
        &store,
        ListFilter::new(100)
            .namespace(namespace.clone())
            .state(RecordState::InProgress),
    )
    .await;
    assert_eq!(running.len(), 2);
    assert!(
        running
            .iter()
            .all(|r| r.state == RecordState::InProgress && r.outcome.is_none())
    );
    let limited = list(&store, ListFilter::new(3).namespace(namespace.clone())).await;
    assert_eq!(limited.len(), 3);
    let later = list(
        &store,
        ListFilter::new(100)
            .namespace(namespace.clone())
            .updated_from(std::time::SystemTime::now() + Duration::from_secs(60)),
    )
    .await;
    assert!(later.is_empty());
    let window = list(
        &store,
        ListFilter::new(100)
            .namespace(namespace.clone())
            .updated_from(started)
            .updated_before(std::time::SystemTime::now() + Duration::from_secs(5)),
    )
    .await;
    assert_eq!(window.len(), 7);

    tokio::time::sleep(Duration::from_millis(500)).await;
    // Other tests share the table: purge until our five completed records are gone, in
    // batches of at most 2.
    let mut rounds = 0;
    loop {
        let mut left = 0;
        for key in &keys[..5] {
            left += usize::from(store.get(key).await.unwrap().is_some());
        }
        if left == 0 {
            break;
        }
        let purged = store.purge_expired(2).await.unwrap();
        assert!(purged <= 2, "a batch never exceeds its limit");
        rounds += 1;
        assert!(rounds < 10_000, "purge makes progress");
    }
    for key in &keys[5..] {
        assert!(store.get(key).await.unwrap().is_some(), "live leases stay");
    }
}

/// The generic background sweeper (`spawn_sweeper`) purges an SQL store's expired records and,
/// once the store's abandoned grace has passed (give it a short one), abandoned leases.
pub async fn sweeper_purges<S: Store>(store: S) {
    let store = Arc::new(store);
    let key = unique_key();
    let fp = Fingerprint::of_bytes(b"x");
    let Claim::Acquired(lease) = store
        .claim(ClaimRequest {
            key: &key,
            namespace: "sweeper",
            fingerprint: &fp,
            lease: Duration::from_secs(30),
            claim_id: idempotency_core::ClaimId::random(),
            mechanism: None,
            key_derivation: None,
        })
        .await
        .unwrap()
    else {
        panic!("fresh key");
    };
    store
        .complete(CompleteRequest {
            key: &key,
            token: lease.token,
            outcome: &Outcome::new(200, "ok"),
            ttl: Duration::from_millis(100),
        })
        .await
        .unwrap();
    // An owner that crashed: its lease ends, and the store's (short) abandoned grace after it.
    let abandoned = unique_key();
    let claim = store
        .claim(ClaimRequest {
            key: &abandoned,
            namespace: "sweeper",
            fingerprint: &fp,
            lease: Duration::from_millis(100),
            claim_id: idempotency_core::ClaimId::random(),
            mechanism: None,
            key_derivation: None,
        })
        .await
        .unwrap();
    assert!(matches!(claim, Claim::Acquired(_)));
    let _sweeper =
        idempotency_core::spawn_sweeper(Arc::clone(&store), Duration::from_millis(50), 100);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    for key in [&key, &abandoned] {
        while store.get(key).await.unwrap().is_some() {
            assert!(
                std::time::Instant::now() < deadline,
                "the sweeper purges expired records and abandoned leases past their grace"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The owner fails (rolls back) while 50 duplicates wait on its row: exactly one of them takes
/// the key and grants, all the others replay that one's outcome. One coupon.
pub async fn tx_owner_rollback_under_storm<S>(store: S, pool: Pool<S::Database>, coupons: String)
where
    S: TxStore + Clone,
    for<'c> &'c mut <S::Database as Database>::Connection: Executor<'c, Database = S::Database>,
    for<'q> <S::Database as Database>::Arguments<'q>: IntoArguments<'q, S::Database>,
    i64: sqlx::Type<S::Database> + for<'r> sqlx::Decode<'r, S::Database>,
    (i64,): for<'r> sqlx::FromRow<'r, <S::Database as Database>::Row>,
{
    const WAITERS: usize = 50;
    let trade_no = format!("T{}", &unique_key().to_hex()[..16]);
    let scope = Scope::new("pay.callback");
    let key = IdempotencyKey::parse(&trade_no).unwrap();
    let fingerprint = Fingerprint::of_bytes(trade_no.as_bytes());
    let mut owner = pool.begin().await.unwrap();
    let TxClaim::Execute(_lease) = store
        .claim_in_tx(&mut owner, &scope, &key, &fingerprint)
        .await
        .unwrap()
    else {
        panic!("the first transaction owns the key");
    };
    let waiters: Vec<_> = (0..WAITERS)
        .map(|_| {
            let (store, pool, coupons, trade_no) = (
                store.clone(),
                pool.clone(),
                coupons.clone(),
                trade_no.clone(),
            );
            tokio::spawn(async move { callback_retrying(&store, &pool, &coupons, &trade_no).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    owner.rollback().await.unwrap();
    let mut seen = Vec::new();
    for waiter in waiters {
        seen.push(waiter.await.unwrap());
    }
    let executed = seen.iter().filter(|s| **s == Seen::Executed).count();
    assert_eq!(
        executed, 1,
        "one waiter takes the key after the rollback: {seen:?}"
    );
    let granted = Outcome::new(200, "coupon granted");
    assert!(
        seen.iter()
            .all(|s| *s == Seen::Executed || *s == Seen::Replayed(granted.clone())),
        "{seen:?}"
    );
    let sql = format!("SELECT COUNT(*) FROM {coupons} WHERE trade_no = '{trade_no}'");
    assert_eq!(count(&pool, &sql).await, 1);
}
