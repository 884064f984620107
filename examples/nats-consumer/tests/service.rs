//! The NATS JetStream coupon service driven from outside: the service (`queue_nats`) and the
//! gateway (`nats_publish`) run as processes of their own against the real NATS server,
//! PostgreSQL and Redis; the service is killed with SIGKILL before its commit and after its
//! commit (before its ack), and its server connection is cut. After each, every trade has exactly
//! one coupon and every message was acked.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use async_nats::jetstream;
use coupon_grants::drill::{Service, Trades};
use idempotency_core::redis::RedisStore;
use idempotency_core::testing::{FaultProxy, unavailable};
use idempotency_core::{IdempotencyKey, RecordState, Scope, Store};

const SERVICE: &str = env!("CARGO_BIN_EXE_queue_nats");
const PRODUCER: &str = env!("CARGO_BIN_EXE_nats_publish");
/// Long enough for anything this machine does (an ack wait included); a wait that ends here
/// fails the test.
const PATIENCE: Duration = Duration::from_secs(60);
/// A fault drill's hold: longer than any test, so that only the kill ends it.
const HOLD: &str = "600000";

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

/// One test's subject and trades, under names no other run uses.
struct Drill {
    subject: String,
    nats_url: String,
    database_url: String,
    trades: Trades,
    js: jetstream::Context,
}

impl Drill {
    /// Connects to NATS and PostgreSQL (`None`: skipped, outside CI).
    async fn new(name: &str) -> Option<Self> {
        let nats_url = nats_consumer::nats_url();
        let database_url = env_or("DATABASE_URL", coupon_grants::DEFAULT_DATABASE_URL);
        let client = match async_nats::connect(&nats_url).await {
            Ok(client) => client,
            Err(error) => return unavailable("NATS", error),
        };
        let trades = match Trades::connect(&database_url, name).await {
            Ok(trades) => trades,
            Err(error) => return unavailable("PostgreSQL", error),
        };
        Some(Self {
            subject: format!("coupon-grant-{}", trades.prefix().trim_end_matches('-')),
            nats_url,
            database_url,
            trades,
            js: jetstream::new(client),
        })
    }

    fn start(&self, vars: &[(&str, &str)]) -> Service {
        self.start_at(&self.nats_url, vars)
    }

    fn start_at(&self, nats_url: &str, vars: &[(&str, &str)]) -> Service {
        let mut all = vec![
            ("QUEUE", self.subject.as_str()),
            ("NATS_URL", nats_url),
            ("DATABASE_URL", self.database_url.as_str()),
        ];
        all.extend_from_slice(vars);
        Service::start(SERVICE, &all).unwrap()
    }

    fn publish(&self, trades: u32, copies: u32) {
        let vars = [
            ("QUEUE", self.subject.as_str()),
            ("NATS_URL", &self.nats_url),
        ];
        self.trades
            .publish(PRODUCER, trades, copies, &vars)
            .unwrap();
    }

    fn stream(&self) -> String {
        nats_consumer::stream_name(&self.subject)
    }

    /// Messages of the stream not yet delivered or delivered and not acked.
    async fn unsettled(&self) -> u64 {
        let stream = self.js.get_stream(self.stream()).await.unwrap();
        let mut consumer: jetstream::consumer::PullConsumer =
            stream.get_consumer("coupon-grants").await.unwrap();
        let info = consumer.info().await.unwrap();
        info.num_pending + u64::try_from(info.num_ack_pending).unwrap_or(u64::MAX)
    }

    /// Waits until every message was acked, then stops the service with SIGTERM.
    async fn drain_and_stop(&self, service: Service) {
        let deadline = Instant::now() + PATIENCE;
        while self.unsettled().await > 0 {
            assert!(
                Instant::now() < deadline,
                "messages still unacked after {PATIENCE:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (status, output) = service.terminate(PATIENCE).await.unwrap();
        assert!(
            status.success(),
            "the service exited with {status}: {output:#?}"
        );
    }

    async fn cleanup(self) {
        let _ = self.js.delete_stream(self.stream()).await;
        let _ = self
            .js
            .delete_stream(format!("{}_DEAD", self.stream()))
            .await;
    }
}

/// The incident: every trade's event six times, from the gateway process, with Redis in front;
/// plus a message that is not a paid event, which lands on the dead-letter subject.
#[tokio::test]
async fn six_messages_per_trade_grant_one_coupon_each_and_a_bad_message_is_dead_lettered() {
    let Some(drill) = Drill::new("nats-incident").await else {
        return;
    };
    let redis_url = env_or("REDIS_URL", "redis://127.0.0.1:6379");
    let mut service = drill.start(&[("REDIS_URL", &redis_url)]);
    service.wait_for("consuming", PATIENCE).await.unwrap();
    drill.publish(3, 6);
    drill
        .js
        .publish(drill.subject.clone(), r#"{"user_id": 7}"#.into())
        .await
        .unwrap()
        .await
        .unwrap();
    drill.trades.wait_for_coupons(3, PATIENCE).await.unwrap();
    drill.drain_and_stop(service).await;
    drill.trades.one_coupon_each(3).await.unwrap();
    let dead = format!("{}_DEAD", drill.stream());
    let mut dead = drill.js.get_stream(dead).await.unwrap();
    assert_eq!(dead.info().await.unwrap().state.messages, 1);
    drill.cleanup().await;
}

/// Killed while the grant's transaction is open: nothing was committed; JetStream redelivers
/// the message after its ack wait, and the restarted service grants the coupon once.
#[tokio::test]
async fn killed_before_its_commit_the_restarted_service_grants_once() {
    let Some(drill) = Drill::new("nats-before-commit").await else {
        return;
    };
    let mut service = drill.start(&[("HANDLER_DELAY_MS", HOLD)]);
    service.wait_for("consuming", PATIENCE).await.unwrap();
    drill.publish(1, 6);
    let held = format!("holding {} before its commit", drill.trades.trade(1));
    service.wait_for(&held, PATIENCE).await.unwrap();
    service.kill().await.unwrap();
    assert!(
        drill.trades.coupons().await.unwrap().is_empty(),
        "nothing committed"
    );

    let restarted = drill.start(&[]);
    drill.trades.wait_for_coupons(1, PATIENCE).await.unwrap();
    drill.drain_and_stop(restarted).await;
    drill.trades.one_coupon_each(1).await.unwrap();
    drill.cleanup().await;
}

/// Killed after the grant's commit, before its ack: the redelivery (after the ack wait) meets
/// the dead service's Redis claim, still held, and is answered by the SQL record with the
/// coupon the first run granted; no second coupon.
#[tokio::test]
async fn killed_after_its_commit_the_redelivery_is_answered_by_the_sql_record() {
    let Some(drill) = Drill::new("nats-after-commit").await else {
        return;
    };
    let redis_url = env_or("REDIS_URL", "redis://127.0.0.1:6379");
    let redis = match RedisStore::connect(&redis_url).await {
        Ok(redis) => redis,
        Err(error) => return unavailable("Redis", error).unwrap_or(()),
    };
    let mut service = drill.start(&[("REDIS_URL", &redis_url), ("ACK_DELAY_MS", HOLD)]);
    service.wait_for("consuming", PATIENCE).await.unwrap();
    // One delivery: with copies, a copy that claims Redis first may see the holder's commit
    // through the SQL record and complete the Redis record itself (correct, and then the
    // redelivery is a plain Redis duplicate; this test is about the dead claim).
    drill.publish(1, 1);
    let trade = drill.trades.trade(1);
    let granted = service
        .wait_for(&format!("granted {trade}:"), PATIENCE)
        .await
        .unwrap();
    service
        .wait_for(&format!("holding {trade} after its commit"), PATIENCE)
        .await
        .unwrap();
    let killed_at = Instant::now();
    service.kill().await.unwrap();
    drill.trades.one_coupon_each(1).await.unwrap();

    let mut restarted = drill.start(&[("REDIS_URL", &redis_url)]);
    let replayed = restarted
        .wait_for(&format!("already granted {trade}:"), PATIENCE)
        .await
        .unwrap();
    eprintln!(
        "redelivery to done after a kill after commit: {:?} from the kill (ack wait {:?})",
        killed_at.elapsed(),
        nats_consumer::ACK_WAIT
    );
    let coupon = |line: &str| line.rsplit_once(": ").unwrap().1.to_owned();
    assert_eq!(coupon(&replayed), coupon(&granted));
    let key = Scope::new("coupon-grant").storage_key(&IdempotencyKey::parse(&trade).unwrap());
    let record = redis.get(&key).await.unwrap().expect("the dead claim");
    assert_eq!(record.state, RecordState::InProgress);

    drill.drain_and_stop(restarted).await;
    drill.trades.one_coupon_each(1).await.unwrap();
    drill.cleanup().await;
}

/// The server connection is cut (TCP resets, through a proxy) twice while messages are in hand:
/// the client reconnects, what was unacked is redelivered, nothing is lost and no trade gets two
/// coupons.
#[tokio::test]
async fn a_cut_server_connection_loses_nothing_and_grants_nothing_twice() {
    let Some(drill) = Drill::new("nats-connection-cut").await else {
        return;
    };
    let upstream = drill
        .nats_url
        .trim_start_matches("nats://")
        .trim_end_matches('/')
        .to_owned();
    let proxy = FaultProxy::start(upstream.as_str()).await.unwrap();
    let through_proxy = format!("nats://{}", proxy.addr());
    let mut service = drill.start_at(&through_proxy, &[("HANDLER_DELAY_MS", "20")]);
    service.wait_for("consuming", PATIENCE).await.unwrap();
    drill.publish(20, 6);
    for trades in [5, 12] {
        drill
            .trades
            .wait_for_coupons(trades, PATIENCE)
            .await
            .unwrap();
        proxy.reset();
    }
    drill.trades.wait_for_coupons(20, PATIENCE).await.unwrap();
    drill.drain_and_stop(service).await;
    drill.trades.one_coupon_each(20).await.unwrap();
    drill.cleanup().await;
}

/// Two replicas of the service, as deployed; the one that granted the coupon is killed after its
/// commit, before its ack. The other gets the redelivery (after the ack wait (`ACK_WAIT`)) and answers it from the
/// SQL record, with the first one's coupon. Prints the time from the kill to that answer.
#[tokio::test]
async fn a_replica_killed_after_its_commit_leaves_the_redelivery_to_the_other() {
    let Some(drill) = Drill::new("replicas").await else {
        return;
    };
    let redis_url = env_or("REDIS_URL", "redis://127.0.0.1:6379");
    // Both hold a fresh grant after its commit; a redelivery answered from the record is not held.
    let held = [("REDIS_URL", redis_url.as_str()), ("ACK_DELAY_MS", HOLD)];
    let (mut one, mut two) = (drill.start(&held), drill.start(&held));
    one.wait_for("consuming", PATIENCE).await.unwrap();
    two.wait_for("consuming", PATIENCE).await.unwrap();
    drill.publish(1, 1);
    let trade = drill.trades.trade(1);
    let holding = format!("holding {trade} after its commit");
    let (granted, mut survivor) = tokio::select! {
        line = one.wait_for(&holding, PATIENCE) => {
            line.unwrap();
            one.kill().await.unwrap();
            ("one", two)
        }
        line = two.wait_for(&holding, PATIENCE) => {
            line.unwrap();
            two.kill().await.unwrap();
            ("two", one)
        }
    };
    let killed_at = Instant::now();
    survivor
        .wait_for(&format!("already granted {trade}:"), PATIENCE)
        .await
        .unwrap();
    eprintln!(
        "replica {granted} killed after its commit; the other answered the redelivery {:?} after the kill",
        killed_at.elapsed()
    );
    drill.trades.one_coupon_each(1).await.unwrap();
    drill.drain_and_stop(survivor).await;
    drill.cleanup().await;
}
