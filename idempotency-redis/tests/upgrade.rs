//! Upgrades that change a key derivation, for idempotent functions (`#[idempotent]`, `Call`),
//! on the memory store and on Redis (REDIS_URL, default redis://127.0.0.1:6379). Key
//! derivation 1 (release 0.1) keyed a function's record as a request's; derivations 2 and 3
//! key it by its mechanism. With `with_previous_keys(true)` a node claims the previous derivation's
//! key first: records the previous release wrote are replayed, and a fleet of nodes of both
//! releases runs each key once. The SQL twin (transactions) is `tx_upgrade` in `idempotency-sql`'s tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idempotency_core::{
    BoxStore, Decision, Error, Fingerprint, Idempotency, InFlightPolicy, Mechanism, MemoryStore,
    Outcome, Scope, Store,
};
use idempotency_function::{self as function, Call, STATUS_OK};
use idempotency_redis::RedisStore;
use idempotency_test::{unavailable, unique_key};

const NAMESPACE: &str = "coupons";

/// The memory store, and Redis when it answers (under `CI=true` it must).
async fn stores() -> Vec<(&'static str, BoxStore)> {
    let mut stores = vec![("memory", BoxStore::new(MemoryStore::new()))];
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    match RedisStore::connect(&url).await {
        Ok(redis) => stores.push(("redis", BoxStore::new(redis))),
        Err(error) => unavailable::<()>("Redis", error).unwrap_or_default(),
    }
    stores
}

fn trade() -> String {
    format!("T{}", &unique_key().to_hex()[..16])
}

/// The fingerprint a `Call` with one argument `amount` has (0.1 built it alike).
fn fingerprint_of(amount: u32) -> Fingerprint {
    let json = serde_json::to_value(amount).unwrap();
    Fingerprint::builder()
        .field(
            b"amount",
            idempotency_core::canonical_json(&json).as_bytes(),
        )
        .finish()
}

/// Counts the runs of the coupon grant per trade.
#[derive(Clone, Default)]
struct Grants(Arc<Mutex<HashMap<String, u32>>>);

impl Grants {
    fn grant(&self, trade_no: &str) -> u32 {
        let mut runs = self.0.lock().unwrap();
        let count = runs.entry(trade_no.to_owned()).or_default();
        *count += 1;
        *count
    }

    fn runs(&self, trade_no: &str) -> u32 {
        self.0.lock().unwrap().get(trade_no).copied().unwrap_or(0)
    }
}

/// A 0.1 node's `#[idempotent]` coupon grant: the record under the key of a request.
async fn grant_as_0_1(
    engine: &Idempotency<BoxStore>,
    grants: &Grants,
    trade_no: &str,
) -> Result<u32, Error> {
    let fingerprint = fingerprint_of(100);
    match engine
        .claim(
            &Scope::new(NAMESPACE),
            trade_no,
            &fingerprint,
            InFlightPolicy::Reject,
        )
        .await?
    {
        Decision::Execute(execution) => {
            let coupon = grants.grant(trade_no);
            tokio::time::sleep(Duration::from_millis(5)).await;
            let body = serde_json::to_vec(&coupon).unwrap();
            execution.complete(Outcome::new(STATUS_OK, body)).await?;
            Ok(coupon)
        }
        Decision::Replay(outcome) => Ok(serde_json::from_slice(&outcome.body).unwrap()),
        Decision::InFlight { retry_after } => Err(Error::InFlight { retry_after }),
        Decision::Mismatch => Err(Error::Mismatch),
    }
}

/// A 0.2 node's grant; `fails` makes the body fail (the key is then released).
async fn grant_as_0_2(
    engine: &Idempotency<BoxStore>,
    grants: &Grants,
    trade_no: &str,
    fails: bool,
) -> Result<u32, Error> {
    let call = Call::new(NAMESPACE, trade_no).fingerprint("amount", &100u32);
    function::run::<Result<u32, Error>, _, _, _>(engine.clone(), call, From::from, async {
        tokio::time::sleep(Duration::from_millis(5)).await;
        if fails {
            return Err(Error::Codec("the coupon service said no".into()));
        }
        Ok(grants.grant(trade_no))
    })
    .await
}

#[tokio::test]
async fn records_and_claims_of_0_1_are_honoured() {
    for (name, store) in stores().await {
        let old = Idempotency::new(store.clone());
        let bridged = Idempotency::new(store.clone()).with_previous_keys(true);
        let plain = Idempotency::new(store);
        let grants = Grants::default();

        let done = trade();
        assert_eq!(grant_as_0_1(&old, &grants, &done).await.unwrap(), 1);
        let replayed = grant_as_0_2(&bridged, &grants, &done, false).await;
        assert_eq!(replayed.unwrap(), 1, "{name}: 0.1's value is replayed");
        assert_eq!(grants.runs(&done), 1, "{name}: not run again");
        grant_as_0_2(&plain, &grants, &done, false).await.unwrap();
        assert_eq!(
            grants.runs(&done),
            2,
            "{name}: without the setting 0.1's record is not seen"
        );

        let running = trade();
        let held = old
            .claim(
                &Scope::new(NAMESPACE),
                &running,
                &fingerprint_of(100),
                InFlightPolicy::Reject,
            )
            .await
            .unwrap();
        let Decision::Execute(held) = held else {
            panic!("{name}: a fresh key")
        };
        let refused = grant_as_0_2(&bridged, &grants, &running, false).await;
        assert!(
            matches!(refused, Err(Error::InFlight { .. })),
            "{name}: 0.1's claim is in flight: {refused:?}"
        );
        held.complete(Outcome::new(STATUS_OK, "7")).await.unwrap();
        let replayed = grant_as_0_2(&bridged, &grants, &running, false).await;
        assert_eq!(replayed.unwrap(), 7, "{name}");
        assert_eq!(grants.runs(&running), 0, "{name}");
    }
}

#[tokio::test]
async fn bridged_records_are_seen_by_every_node_and_failures_free_both_keys() {
    for (name, store) in stores().await {
        let old = Idempotency::new(store.clone());
        let bridged = Idempotency::new(store.clone()).with_previous_keys(true);
        let plain = Idempotency::new(store);
        let grants = Grants::default();

        let done = trade();
        assert_eq!(
            grant_as_0_2(&bridged, &grants, &done, false).await.unwrap(),
            1
        );
        // Each record says which derivation wrote its key.
        let scope = Scope::new(NAMESPACE);
        for (mechanism, derivation) in [(Mechanism::Request, 1), (Mechanism::Function, 3)] {
            let record = bridged
                .store()
                .get(&scope.storage_key_for(mechanism, &done))
                .await
                .unwrap()
                .expect("both keys hold a record");
            assert_eq!(
                (record.mechanism, record.key_derivation),
                (Some(Mechanism::Function), Some(derivation)),
                "{name}"
            );
        }
        assert_eq!(
            grant_as_0_1(&old, &grants, &done).await.unwrap(),
            1,
            "{name}"
        );
        let after = grant_as_0_2(&plain, &grants, &done, false).await;
        assert_eq!(
            after.unwrap(),
            1,
            "{name}: nodes past the upgrade replay it"
        );
        assert_eq!(grants.runs(&done), 1, "{name}");

        let failed = trade();
        let answer = grant_as_0_2(&bridged, &grants, &failed, true).await;
        assert!(answer.is_err(), "{name}");
        assert_eq!(
            grant_as_0_1(&old, &grants, &failed).await.unwrap(),
            1,
            "{name}: the key of 0.1 was released"
        );
        assert_eq!(
            grant_as_0_2(&plain, &grants, &failed, false).await.unwrap(),
            2,
            "{name}: so was the key of 0.2"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fleet_of_0_1_and_bridged_nodes_grants_once() {
    const TRADES: usize = 30;
    const CALLERS: usize = 8;
    for (name, store) in stores().await {
        let old = Idempotency::new(store.clone());
        let bridged = Idempotency::new(store).with_previous_keys(true);
        let grants = Grants::default();
        let trades: Vec<String> = (0..TRADES).map(|_| trade()).collect();
        let mut tasks = Vec::new();
        for trade_no in &trades {
            for caller in 0..CALLERS {
                let (old, bridged, grants) = (old.clone(), bridged.clone(), grants.clone());
                let trade_no = trade_no.clone();
                tasks.push(tokio::spawn(async move {
                    loop {
                        let answer = if caller % 2 == 0 {
                            grant_as_0_1(&old, &grants, &trade_no).await
                        } else {
                            grant_as_0_2(&bridged, &grants, &trade_no, false).await
                        };
                        match answer {
                            Err(Error::InFlight { .. }) => {
                                tokio::time::sleep(Duration::from_millis(10)).await;
                            }
                            answer => return (trade_no, answer.unwrap()),
                        }
                    }
                }));
            }
        }
        for task in tasks {
            let (trade_no, coupon) = task.await.unwrap();
            assert_eq!(
                coupon, 1,
                "{name}: every caller gets the one coupon of {trade_no}"
            );
        }
        for trade_no in &trades {
            assert_eq!(grants.runs(trade_no), 1, "{name}: {trade_no} granted once");
        }
    }
}
