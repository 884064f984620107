//! The upgrade scenario: nodes of two releases, and previous keys read, in one fleet.

use super::*;

/// Which release a node of the fleet runs, for [`tx_upgrade`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Node {
    /// 0.1: transactions keyed as requests.
    V0_1,
    /// 0.2 with `with_previous_keys(true)`: the key of 0.1 (key derivation 1) first, then its
    /// own.
    Bridged,
    /// 0.2 with the setting off: its own key only.
    V0_2,
}

/// One coupon callback in a transaction, claimed as `node` claims it; a transient abort is
/// retried whole.
async fn callback_as<S>(node: Node, stores: &(S, S), coupons: &str, trade_no: &str) -> Seen
where
    S: TxStore,
    for<'c> &'c mut <S::Database as Database>::Connection: Executor<'c, Database = S::Database>,
    for<'q> <S::Database as Database>::Arguments<'q>: IntoArguments<'q, S::Database>,
{
    let (plain, bridged) = stores;
    let scope = Scope::new("pay.callback");
    let key = IdempotencyKey::parse(trade_no).unwrap();
    let fingerprint = Fingerprint::of_bytes(trade_no.as_bytes());
    for _ in 0..20 {
        let mut tx = plain.begin().await.unwrap();
        let claim = match node {
            Node::V0_1 => {
                let key_of_0_1 = scope.storage_key(&key);
                let request = plain.tx_request(scope.namespace(), &key_of_0_1, &fingerprint);
                plain.claim_storage_key_in_tx(&mut tx, request).await
            }
            Node::Bridged => {
                bridged
                    .claim_in_tx(&mut tx, &scope, &key, &fingerprint)
                    .await
            }
            Node::V0_2 => plain.claim_in_tx(&mut tx, &scope, &key, &fingerprint).await,
        };
        let seen = match claim {
            Ok(TxClaim::Execute(lease)) => {
                let grant = format!("INSERT INTO {coupons} (trade_no) VALUES ('{trade_no}')");
                sqlx::query(&grant).execute(&mut *tx).await.unwrap();
                let outcome = Outcome::new(200, "coupon granted");
                // The lease says which keys it holds; completing is the same on every node.
                plain
                    .complete_in_tx(&mut tx, lease, &outcome)
                    .await
                    .unwrap();
                Seen::Executed
            }
            Ok(TxClaim::Replay(outcome)) => Seen::Replayed(outcome),
            Ok(TxClaim::InFlight { .. }) => Seen::InFlight,
            Ok(TxClaim::Mismatch) => Seen::Mismatch,
            Err(error) if error.is_transient() => {
                eprintln!("retrying an aborted transaction: {error}");
                continue;
            }
            Err(error) => panic!("{node:?}: claim failed: {error}"),
        };
        if seen == Seen::Executed {
            tx.commit().await.unwrap();
        } else {
            tx.rollback().await.unwrap();
        }
        return seen;
    }
    panic!("20 aborted transactions in a row");
}

/// The upgrade from 0.1, key derivation 1 to 2 (`with_previous_keys`): a record 0.1 committed is replayed by bridged
/// nodes; a fleet of 0.1 and bridged nodes runs a storm of one callback once; a record bridged
/// nodes wrote is replayed by 0.1 and by 0.2 nodes with the setting off. Without the setting,
/// a 0.2 node does not see 0.1's record (why the setting exists).
pub async fn tx_upgrade<S>(plain: S, bridged: S, pool: Pool<S::Database>, coupons: String)
where
    S: TxStore + Clone,
    for<'c> &'c mut <S::Database as Database>::Connection: Executor<'c, Database = S::Database>,
    for<'q> <S::Database as Database>::Arguments<'q>: IntoArguments<'q, S::Database>,
    i64: sqlx::Type<S::Database> + for<'r> sqlx::Decode<'r, S::Database>,
    (i64,): for<'r> sqlx::FromRow<'r, <S::Database as Database>::Row>,
{
    assert!(bridged.reads_previous_keys() && !plain.reads_previous_keys());
    let stores = Arc::new((plain, bridged));
    let granted = Seen::Replayed(Outcome::new(200, "coupon granted"));
    let trade = || format!("T{}", &unique_key().to_hex()[..16]);
    let coupons_of =
        |trade_no: &str| format!("SELECT COUNT(*) FROM {coupons} WHERE trade_no = '{trade_no}'");

    let paid_under_0_1 = trade();
    assert_eq!(
        callback_as(Node::V0_1, &stores, &coupons, &paid_under_0_1).await,
        Seen::Executed
    );
    assert_eq!(
        callback_as(Node::Bridged, &stores, &coupons, &paid_under_0_1).await,
        granted,
        "0.1's record is replayed"
    );
    assert_eq!(
        callback_as(Node::V0_2, &stores, &coupons, &paid_under_0_1).await,
        Seen::Executed,
        "without the setting, 0.1's record is not seen"
    );

    let paid_bridged = trade();
    assert_eq!(
        callback_as(Node::Bridged, &stores, &coupons, &paid_bridged).await,
        Seen::Executed
    );
    assert_eq!(
        callback_as(Node::V0_1, &stores, &coupons, &paid_bridged).await,
        granted,
        "0.1 nodes see it"
    );
    assert_eq!(
        callback_as(Node::V0_2, &stores, &coupons, &paid_bridged).await,
        granted,
        "so do nodes past the upgrade"
    );
    assert_eq!(count(&pool, &coupons_of(&paid_bridged)).await, 1);

    // A rolling deploy: 0.1 and bridged nodes side by side, every callback at once.
    let storm = trade();
    let seen = concurrently(40, |caller| {
        let node = if caller % 2 == 0 {
            Node::V0_1
        } else {
            Node::Bridged
        };
        let (stores, coupons, storm) = (Arc::clone(&stores), coupons.clone(), storm.clone());
        async move {
            loop {
                match callback_as(node, &stores, &coupons, &storm).await {
                    Seen::InFlight => tokio::time::sleep(Duration::from_millis(20)).await,
                    seen => return seen,
                }
            }
        }
    })
    .await;
    let executed = seen.iter().filter(|s| **s == Seen::Executed).count();
    assert_eq!(
        executed, 1,
        "one run across 0.1 and bridged nodes: {seen:?}"
    );
    assert!(
        seen.iter().all(|s| *s == Seen::Executed || *s == granted),
        "{seen:?}"
    );
    assert_eq!(count(&pool, &coupons_of(&storm)).await, 1, "one coupon");
}
