//! The RabbitMQ coupon service driven from outside, as an operator meets it: the service
//! (`queue_rabbitmq`) and the gateway (`rabbitmq_publish`) run as processes of their own against
//! the real RabbitMQ, PostgreSQL and Redis; the service is killed with SIGKILL before its commit
//! and after its commit (before its ack), and its broker connection is cut. After each, every
//! trade has exactly one coupon and every delivery was acked.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use coupon_grants::drill::{Service, Trades};
use idempotency_core::redis::RedisStore;
use idempotency_core::testing::{FaultProxy, unavailable};
use idempotency_core::{IdempotencyKey, RecordState, Scope, Store};
use lapin::options::{
    BasicPublishOptions, ExchangeDeleteOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection};

const SERVICE: &str = env!("CARGO_BIN_EXE_queue_rabbitmq");
const PRODUCER: &str = env!("CARGO_BIN_EXE_rabbitmq_publish");
/// Long enough for anything this machine does; a wait that ends here fails the test.
const PATIENCE: Duration = Duration::from_secs(60);
/// A fault drill's hold: longer than any test, so that only the kill ends it.
const HOLD: &str = "600000";

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

/// One test's queue and trades, under names no other run uses.
struct Drill {
    queue: String,
    amqp_url: String,
    database_url: String,
    trades: Trades,
    connection: Connection,
    channel: Channel,
}

impl Drill {
    /// Connects to RabbitMQ and PostgreSQL (`None`: skipped, outside CI).
    async fn new(name: &str) -> Option<Self> {
        let amqp_url = rabbitmq_consumer::amqp_url();
        let database_url = env_or("DATABASE_URL", coupon_grants::DEFAULT_DATABASE_URL);
        let (connection, channel) = match rabbitmq_consumer::open(&amqp_url).await {
            Ok(opened) => opened,
            Err(error) => return unavailable("RabbitMQ", error),
        };
        let trades = match Trades::connect(&database_url, name).await {
            Ok(trades) => trades,
            Err(error) => return unavailable("PostgreSQL", error),
        };
        Some(Self {
            queue: format!("coupon-grant-{}", trades.prefix().trim_end_matches('-')),
            amqp_url,
            database_url,
            trades,
            connection,
            channel,
        })
    }

    /// Starts the service on this drill's queue, with `vars` besides.
    fn start(&self, vars: &[(&str, &str)]) -> Service {
        self.start_at(&self.amqp_url, vars)
    }

    fn start_at(&self, amqp_url: &str, vars: &[(&str, &str)]) -> Service {
        let mut all = vec![
            ("QUEUE", self.queue.as_str()),
            ("AMQP_URL", amqp_url),
            ("DATABASE_URL", self.database_url.as_str()),
        ];
        all.extend_from_slice(vars);
        Service::start(SERVICE, &all).unwrap()
    }

    /// Runs the gateway: `trades` trades, each published `copies` times.
    fn publish(&self, trades: u32, copies: u32) {
        let vars = [("QUEUE", self.queue.as_str()), ("AMQP_URL", &self.amqp_url)];
        self.trades
            .publish(PRODUCER, trades, copies, &vars)
            .unwrap();
    }

    async fn wait_for_coupons(&self, trades: usize) {
        self.trades
            .wait_for_coupons(trades, PATIENCE)
            .await
            .unwrap();
    }

    async fn assert_one_coupon_per_trade(&self, trades: u32) {
        self.trades.one_coupon_each(trades).await.unwrap();
    }

    /// Messages in `queue` not acked (ready; with no consumer, that is all of them).
    async fn messages_in(&self, queue: &str) -> u32 {
        let declared = self
            .channel
            .queue_declare(
                queue.into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap();
        declared.message_count()
    }

    /// Waits until the broker has delivered every message, stops the service with SIGTERM and
    /// checks that it settled every delivery it had (a graceful stop finishes them).
    async fn stop_and_check_drained(&self, service: Service) {
        let deadline = Instant::now() + PATIENCE;
        while self.messages_in(&self.queue).await > 0 {
            assert!(
                Instant::now() < deadline,
                "messages still undelivered after {PATIENCE:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (status, output) = service.terminate(PATIENCE).await.unwrap();
        assert!(
            status.success(),
            "the service exited with {status}: {output:#?}"
        );
        assert_eq!(
            self.messages_in(&self.queue).await,
            0,
            "every delivery acked; the service's last lines: {output:#?}"
        );
    }

    async fn cleanup(self) {
        let dead = idempotency_queue::rabbitmq::dead_letter_name(&self.queue);
        for queue in [&self.queue, &dead] {
            let _ = self
                .channel
                .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
                .await;
        }
        let _ = self
            .channel
            .exchange_delete(dead.as_str().into(), ExchangeDeleteOptions::default())
            .await;
        let _ = self.connection.close(200, "done".into()).await;
    }
}

/// The incident: every trade's event six times, from the gateway process, with Redis in front;
/// plus a message that is not a paid event, which lands in the dead-letter queue.
#[tokio::test]
async fn six_deliveries_per_trade_grant_one_coupon_each_and_a_bad_message_is_dead_lettered() {
    let Some(drill) = Drill::new("incident").await else {
        return;
    };
    let redis_url = env_or("REDIS_URL", "redis://127.0.0.1:6379");
    let mut service = drill.start(&[("REDIS_URL", &redis_url)]);
    service.wait_for("consuming", PATIENCE).await.unwrap();
    drill.publish(3, 6);
    drill
        .channel
        .basic_publish(
            "".into(),
            drill.queue.as_str().into(),
            BasicPublishOptions::default(),
            br#"{"user_id": 7}"#,
            BasicProperties::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    drill.wait_for_coupons(3).await;
    let dead = idempotency_queue::rabbitmq::dead_letter_name(&drill.queue);
    let deadline = Instant::now() + PATIENCE;
    while drill.messages_in(&dead).await < 1 {
        assert!(
            Instant::now() < deadline,
            "the bad message never reached {dead}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drill.stop_and_check_drained(service).await;
    drill.assert_one_coupon_per_trade(3).await;
    assert_eq!(drill.messages_in(&dead).await, 1);
    drill.cleanup().await;
}

/// Killed while the grant's transaction is open: nothing was committed; the restarted service
/// grants the coupon once.
#[tokio::test]
async fn killed_before_its_commit_the_restarted_service_grants_once() {
    let Some(drill) = Drill::new("before-commit").await else {
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
    drill.wait_for_coupons(1).await;
    drill.stop_and_check_drained(restarted).await;
    drill.assert_one_coupon_per_trade(1).await;
    drill.cleanup().await;
}

/// Killed after the grant's commit, before its ack: the redelivery meets the dead service's
/// Redis claim, still held (its lease has not ended), and is answered at once by the SQL record
/// with the coupon the first run granted; no second coupon.
#[tokio::test]
async fn killed_after_its_commit_the_redelivery_is_answered_by_the_sql_record_at_once() {
    let Some(drill) = Drill::new("after-commit").await else {
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
    service.kill().await.unwrap();
    drill.assert_one_coupon_per_trade(1).await;

    let restarted_at = Instant::now();
    let mut restarted = drill.start(&[("REDIS_URL", &redis_url)]);
    let replayed = restarted
        .wait_for(&format!("already granted {trade}:"), PATIENCE)
        .await
        .unwrap();
    eprintln!(
        "redelivery to done after a kill after commit: {:?} from the restart",
        restarted_at.elapsed()
    );
    // The same coupon as the first run's, replayed from the SQL record.
    let coupon = |line: &str| line.rsplit_once(": ").unwrap().1.to_owned();
    assert_eq!(coupon(&replayed), coupon(&granted));
    // The dead service's claim is still in Redis: the SQL record answered without waiting
    // for its lease to end.
    let key = Scope::new("coupon-grant").storage_key(&IdempotencyKey::parse(&trade).unwrap());
    let record = redis.get(&key).await.unwrap().expect("the dead claim");
    assert_eq!(record.state, RecordState::InProgress);

    drill.stop_and_check_drained(restarted).await;
    drill.assert_one_coupon_per_trade(1).await;
    drill.cleanup().await;
}

/// The broker connection is cut (TCP resets, through a proxy) twice while deliveries are in
/// hand: the service reconnects, the broker redelivers what was unacked, nothing is lost and no
/// trade gets two coupons.
#[tokio::test]
async fn a_cut_broker_connection_loses_nothing_and_grants_nothing_twice() {
    let Some(drill) = Drill::new("connection-cut").await else {
        return;
    };
    let upstream = drill
        .amqp_url
        .split_once('@')
        .map_or("127.0.0.1:5672", |(_, rest)| {
            rest.split('/').next().unwrap_or(rest)
        })
        .to_owned();
    let proxy = FaultProxy::start(upstream.as_str()).await.unwrap();
    let through_proxy = format!("amqp://guest:guest@{}/%2f", proxy.addr());
    let mut service = drill.start_at(&through_proxy, &[("HANDLER_DELAY_MS", "20")]);
    service.wait_for("consuming", PATIENCE).await.unwrap();
    drill.publish(20, 6);
    for trades in [5, 12] {
        drill.wait_for_coupons(trades).await;
        proxy.reset();
        service.wait_for("consuming", PATIENCE).await.unwrap();
    }
    drill.wait_for_coupons(20).await;
    drill.stop_and_check_drained(service).await;
    drill.assert_one_coupon_per_trade(20).await;
    drill.cleanup().await;
}

/// Two replicas of the service, as deployed; the one that granted the coupon is killed after its
/// commit, before its ack. The other gets the redelivery (at once: RabbitMQ requeues the unacked delivery when its connection closes) and answers it from the
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
    drill.stop_and_check_drained(survivor).await;
    drill.cleanup().await;
}
