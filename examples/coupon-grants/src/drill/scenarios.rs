//! The fault drill's scenarios, written once for every broker ([`Deployment`]): the gateway
//! publishes, the service is killed before its commit or after it, its broker connection is
//! cut, it is stopped with grants in hand; each ends with exactly one coupon per trade and every
//! delivery settled.

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use idempotency_core::{IdempotencyKey, Mechanism, RecordState, Scope, Store};
use idempotency_redis::RedisStore;
use idempotency_test::FaultProxy;

use super::{Service, Trades};

/// Long enough for anything the machine does (an ack wait included); a wait that ends here
/// fails the scenario.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A fault drill's hold: longer than any scenario, so that only a kill ends it.
const HOLD: &str = "600000";

/// The service on one broker, as the scenarios drive it.
///
/// [`scenario_tests!`](crate::scenario_tests) runs every scenario on a deployment type that
/// also has `async fn new(name: &str) -> Option<Self>` (`None`: the servers are unreachable and
/// the test skips, outside CI) and `async fn cleanup(self)`.
pub trait Deployment {
    /// The drill's trades.
    fn trades(&self) -> &Trades;
    /// The broker's URL (`AMQP_URL`, `NATS_URL`).
    fn broker_url(&self) -> &str;
    /// The broker's address (`host:port`), where a proxy in front of it forwards to.
    fn broker_addr(&self) -> String;
    /// The broker's URL with its address replaced by `addr` (a proxy's).
    fn url_at(&self, addr: SocketAddr) -> String;
    /// Starts the service on the drill's queue through `broker_url`, with `vars` besides.
    fn start_via(&self, broker_url: &str, vars: &[(&str, &str)]) -> std::io::Result<Service>;
    /// Runs the gateway, the producer process: `trades` trades, each `copies` times.
    fn publish(&self, trades: u32, copies: u32) -> Result<(), String>;
    /// Publishes one message with `payload` to the drill's queue.
    fn publish_raw(&self, payload: &'static [u8]) -> impl Future<Output = Result<(), String>>;
    /// How many messages the dead-letter destination holds.
    fn dead_letters(&self) -> impl Future<Output = Result<u64, String>>;
    /// Waits until the broker delivered every message and the service settled them, stops the
    /// service with SIGTERM, and checks that it exited well with nothing left unacked.
    fn drain_and_stop(&self, service: Service) -> impl Future<Output = Result<(), String>>;

    /// Starts the service through the broker's own URL.
    fn start(&self, vars: &[(&str, &str)]) -> Result<Service, String> {
        self.start_via(self.broker_url(), vars)
            .map_err(|error| format!("starting the service: {error}"))
    }
}

fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// Checks that `trade`'s record in the fast tier, the dead service's pending claim, was settled
/// by the redelivery once the SQL record answered it (without waiting for the claim's lease to
/// end): later copies replay from Redis in one round trip.
async fn dead_claim_settled(trade: &str) -> Result<(), String> {
    let redis = RedisStore::connect(&redis_url())
        .await
        .map_err(|error| format!("Redis: {error}"))?;
    let key = IdempotencyKey::parse(trade).map_err(|error| error.to_string())?;
    // Consumers key their records as messages, in both tiers.
    let key = Scope::new("coupon-grant").storage_key_for(Mechanism::Message, key.as_str());
    let record = redis.get(&key).await.map_err(|error| error.to_string())?;
    match record.map(|record| record.state) {
        Some(RecordState::Completed) => Ok(()),
        other => Err(format!(
            "the dead service's Redis claim of {trade} is {other:?}, not settled"
        )),
    }
}

/// The coupon id in a service line `… T1: {"coupon_id":17}`.
fn coupon_of(line: &str) -> &str {
    line.rsplit_once(": ").map_or(line, |(_, coupon)| coupon)
}

/// The incident: every trade's event six times from the gateway process, Redis in front, and a
/// message that is not a paid event, which lands in the dead-letter destination.
pub async fn incident<D: Deployment>(drill: &D) -> Result<(), String> {
    let mut service = drill.start(&[("REDIS_URL", &redis_url())])?;
    service.wait_for("consuming", PATIENCE).await?;
    drill.publish(3, 6)?;
    drill.publish_raw(br#"{"user_id": 7}"#).await?;
    drill.trades().wait_for_coupons(3, PATIENCE).await?;
    let deadline = Instant::now() + PATIENCE;
    while drill.dead_letters().await? < 1 {
        if Instant::now() > deadline {
            return Err("the bad message was never dead-lettered".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drill.drain_and_stop(service).await?;
    drill.trades().one_coupon_each(3).await?;
    match drill.dead_letters().await? {
        1 => Ok(()),
        n => Err(format!("{n} dead letters, expected the bad message alone")),
    }
}

/// Killed while the grant's transaction is open: nothing was committed; the restarted service
/// grants the coupon once.
pub async fn killed_before_commit<D: Deployment>(drill: &D) -> Result<(), String> {
    let mut service = drill.start(&[("HANDLER_DELAY_MS", HOLD)])?;
    service.wait_for("consuming", PATIENCE).await?;
    drill.publish(1, 6)?;
    let held = format!("holding {} before its commit", drill.trades().trade(1));
    service.wait_for(&held, PATIENCE).await?;
    service.kill().await.map_err(|error| error.to_string())?;
    let committed = drill.trades().coupons().await.map_err(|e| e.to_string())?;
    if !committed.is_empty() {
        return Err(format!(
            "a kill before the commit left coupons: {committed:?}"
        ));
    }
    let restarted = drill.start(&[])?;
    drill.trades().wait_for_coupons(1, PATIENCE).await?;
    drill.drain_and_stop(restarted).await?;
    drill.trades().one_coupon_each(1).await
}

/// Killed after the grant's commit, before its ack: the restarted service gets the redelivery,
/// meets the dead service's pending Redis claim, answers from the SQL record with the coupon the
/// first run granted, and settles the claim. Prints the time from the restart (or the kill) to that answer.
pub async fn killed_after_commit<D: Deployment>(drill: &D) -> Result<(), String> {
    let redis = redis_url();
    let mut service = drill.start(&[("REDIS_URL", &redis), ("ACK_DELAY_MS", HOLD)])?;
    service.wait_for("consuming", PATIENCE).await?;
    // One delivery: with copies, a copy that claims Redis first may see the holder's commit
    // through the SQL record and complete the Redis record itself (correct, and then the
    // redelivery is a plain Redis duplicate; this scenario is about the dead claim).
    drill.publish(1, 1)?;
    let trade = drill.trades().trade(1);
    let granted = service
        .wait_for(&format!("granted {trade}:"), PATIENCE)
        .await?;
    let holding = format!("holding {trade} after its commit");
    service.wait_for(&holding, PATIENCE).await?;
    let killed_at = Instant::now();
    service.kill().await.map_err(|error| error.to_string())?;
    drill.trades().one_coupon_each(1).await?;

    let restarted_at = Instant::now();
    let mut restarted = drill.start(&[("REDIS_URL", &redis)])?;
    let replayed = restarted
        .wait_for(&format!("already granted {trade}:"), PATIENCE)
        .await?;
    eprintln!(
        "redelivery to done after a kill after commit: {:?} from the restart, {:?} from the kill",
        restarted_at.elapsed(),
        killed_at.elapsed()
    );
    if coupon_of(&replayed) != coupon_of(&granted) {
        return Err(format!("replayed {replayed:?}, granted {granted:?}"));
    }
    dead_claim_settled(&trade).await?;
    drill.drain_and_stop(restarted).await?;
    drill.trades().one_coupon_each(1).await
}

/// Two replicas, as deployed; the one that granted the coupon is killed after its commit,
/// before its ack. The other gets the redelivery and answers it from the SQL record with the
/// first one's coupon. Prints the time from the kill to that answer.
pub async fn replica_killed_after_commit<D: Deployment>(drill: &D) -> Result<(), String> {
    // Both hold a fresh grant after its commit; a redelivery answered from the record is not held.
    let held = [
        ("REDIS_URL", redis_url()),
        ("ACK_DELAY_MS", HOLD.to_owned()),
    ];
    let held: Vec<(&str, &str)> = held.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (mut one, mut two) = (drill.start(&held)?, drill.start(&held)?);
    one.wait_for("consuming", PATIENCE).await?;
    two.wait_for("consuming", PATIENCE).await?;
    drill.publish(1, 1)?;
    let trade = drill.trades().trade(1);
    let holding = format!("holding {trade} after its commit");
    let (holder, mut survivor) = tokio::select! {
        line = one.wait_for(&holding, PATIENCE) => {
            line?;
            (one, two)
        }
        line = two.wait_for(&holding, PATIENCE) => {
            line?;
            (two, one)
        }
    };
    holder.kill().await.map_err(|error| error.to_string())?;
    let killed_at = Instant::now();
    survivor
        .wait_for(&format!("already granted {trade}:"), PATIENCE)
        .await?;
    eprintln!(
        "a replica killed after its commit; the other answered the redelivery {:?} after the kill",
        killed_at.elapsed()
    );
    drill.trades().one_coupon_each(1).await?;
    drill.drain_and_stop(survivor).await
}

/// The broker connection is cut (TCP resets, through a proxy) twice while deliveries are in
/// hand: the service reconnects, the broker redelivers what was unacked, nothing is lost and no
/// trade gets two coupons.
pub async fn connection_cut<D: Deployment>(drill: &D) -> Result<(), String> {
    let proxy = FaultProxy::start(drill.broker_addr())
        .await
        .map_err(|error| format!("the proxy: {error}"))?;
    let through_proxy = drill.url_at(proxy.addr());
    let mut service = drill
        .start_via(&through_proxy, &[("HANDLER_DELAY_MS", "20")])
        .map_err(|error| error.to_string())?;
    service.wait_for("consuming", PATIENCE).await?;
    drill.publish(20, 6)?;
    for trades in [5, 12] {
        drill.trades().wait_for_coupons(trades, PATIENCE).await?;
        proxy.reset();
    }
    drill.trades().wait_for_coupons(20, PATIENCE).await?;
    drill.drain_and_stop(service).await?;
    drill.trades().one_coupon_each(20).await
}

/// A rolling deploy's stop: SIGTERM while two grants are in hand (their transactions open).
/// The service starts nothing more, finishes and acks the two, and exits 0; the restarted
/// service grants the rest, each once.
pub async fn stopped_with_grants_in_hand<D: Deployment>(drill: &D) -> Result<(), String> {
    let mut service = drill.start(&[("CONCURRENCY", "2"), ("HANDLER_DELAY_MS", "1500")])?;
    service.wait_for("consuming", PATIENCE).await?;
    drill.publish(6, 1)?;
    let mut in_hand = Vec::new();
    for _ in 0..2 {
        let line = service.wait_for("before its commit", PATIENCE).await?;
        let trade = line
            .strip_prefix("holding ")
            .and_then(|rest| rest.split_once(' '))
            .map(|(trade, _)| trade.to_owned())
            .ok_or_else(|| format!("unexpected line {line:?}"))?;
        in_hand.push(trade);
    }
    let (status, rest) = service.terminate(PATIENCE).await?;
    if !status.success() {
        return Err(format!("stopped with {status}: {rest:?}"));
    }
    let granted: Vec<&String> = rest
        .iter()
        .filter(|line| line.starts_with("granted "))
        .collect();
    for trade in &in_hand {
        if !granted
            .iter()
            .any(|line| line.starts_with(&format!("granted {trade}:")))
        {
            return Err(format!(
                "{trade} was in hand at the stop and not granted: {rest:?}"
            ));
        }
    }
    if granted.len() != 2 {
        return Err(format!("grants started after the stop: {granted:?}"));
    }
    let committed = drill.trades().coupons().await.map_err(|e| e.to_string())?;
    if committed.len() != 2 {
        return Err(format!(
            "{} coupons after the stop: {committed:?}",
            committed.len()
        ));
    }
    let restarted = drill.start(&[])?;
    drill.trades().wait_for_coupons(6, PATIENCE).await?;
    drill.drain_and_stop(restarted).await?;
    drill.trades().one_coupon_each(6).await
}

/// One test per scenario on `$drill`, a [`Deployment`] with `new` and `cleanup` (see there):
/// each test builds a drill under its own name, runs its scenario, and cleans up.
#[macro_export]
macro_rules! scenario_tests {
    ($drill:ty) => {
        $crate::scenario_tests!(@test $drill,
            /// The incident: every trade's event six times, Redis in front; a bad message
            /// dead-lettered.
            six_copies_per_trade_grant_one_coupon_each_and_a_bad_message_is_dead_lettered, incident);
        $crate::scenario_tests!(@test $drill,
            /// Killed with the grant's transaction open: the restarted service grants once.
            killed_before_its_commit_the_restarted_service_grants_once, killed_before_commit);
        $crate::scenario_tests!(@test $drill,
            /// Killed after the commit, before the ack: the redelivery is answered by the SQL
            /// record, with the first run's coupon, the dead claim still in Redis.
            killed_after_its_commit_the_redelivery_is_answered_by_the_sql_record, killed_after_commit);
        $crate::scenario_tests!(@test $drill,
            /// Two replicas: the one that granted is killed after its commit; the other answers
            /// the redelivery.
            a_replica_killed_after_its_commit_leaves_the_redelivery_to_the_other, replica_killed_after_commit);
        $crate::scenario_tests!(@test $drill,
            /// The broker connection cut twice mid-run: nothing lost, nothing granted twice.
            a_cut_broker_connection_loses_nothing_and_grants_nothing_twice, connection_cut);
        $crate::scenario_tests!(@test $drill,
            /// SIGTERM with two grants in hand: both finish and are acked, nothing else starts,
            /// the restarted service grants the rest once.
            a_sigterm_finishes_the_grants_in_hand_and_starts_no_other, stopped_with_grants_in_hand);
    };
    (@test $drill:ty, $(#[$doc:meta])* $name:ident, $scenario:ident) => {
        $(#[$doc])*
        #[tokio::test]
        async fn $name() {
            let Some(drill) = <$drill>::new(stringify!($scenario)).await else {
                return;
            };
            $crate::drill::scenarios::$scenario(&drill).await.unwrap();
            drill.cleanup().await;
        }
    };
}
