//! The RabbitMQ coupon service driven from outside, as an operator meets it: the service
//! (`queue_rabbitmq`) and the gateway (`rabbitmq_publish`) run as processes of their own against
//! the real RabbitMQ, PostgreSQL and Redis, through the drill's scenarios
//! (`coupon_grants::drill::scenarios`): SIGKILL before the commit and after it (before the ack),
//! two replicas, a cut broker connection. After each, every trade has exactly one coupon and
//! every delivery was acked.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use coupon_grants::drill::scenarios::{Deployment, PATIENCE};
use coupon_grants::drill::{Service, Trades, unavailable};
use lapin::options::{
    BasicPublishOptions, ExchangeDeleteOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection};

const SERVICE: &str = env!("CARGO_BIN_EXE_queue_rabbitmq");
const PRODUCER: &str = env!("CARGO_BIN_EXE_rabbitmq_publish");

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
        let database_url = std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| coupon_grants::DEFAULT_DATABASE_URL.to_owned());
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

    /// Messages in `queue` not delivered (with no consumer, not acked).
    async fn messages_in(&self, queue: &str) -> Result<u32, String> {
        let passive = QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        };
        let declared = self
            .channel
            .queue_declare(queue.into(), passive, FieldTable::default())
            .await
            .map_err(|error| error.to_string())?;
        Ok(declared.message_count())
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

impl Deployment for Drill {
    fn trades(&self) -> &Trades {
        &self.trades
    }

    fn broker_url(&self) -> &str {
        &self.amqp_url
    }

    fn broker_addr(&self) -> String {
        let authority = self.amqp_url.split_once('@').map_or("", |(_, rest)| rest);
        authority
            .split('/')
            .next()
            .unwrap_or("127.0.0.1:5672")
            .to_owned()
    }

    fn url_at(&self, addr: SocketAddr) -> String {
        format!("amqp://guest:guest@{addr}/%2f")
    }

    fn start_via(&self, broker_url: &str, vars: &[(&str, &str)]) -> std::io::Result<Service> {
        let mut all = vec![
            ("QUEUE", self.queue.as_str()),
            ("AMQP_URL", broker_url),
            ("DATABASE_URL", self.database_url.as_str()),
        ];
        all.extend_from_slice(vars);
        Service::start(SERVICE, &all)
    }

    fn publish(&self, trades: u32, copies: u32) -> Result<(), String> {
        let vars = [("QUEUE", self.queue.as_str()), ("AMQP_URL", &self.amqp_url)];
        self.trades.publish(PRODUCER, trades, copies, &vars)
    }

    async fn publish_raw(&self, payload: &'static [u8]) -> Result<(), String> {
        let confirm = self
            .channel
            .basic_publish(
                "".into(),
                self.queue.as_str().into(),
                BasicPublishOptions::default(),
                payload,
                BasicProperties::default(),
            )
            .await
            .map_err(|error| error.to_string())?;
        confirm.await.map_err(|error| error.to_string())?;
        Ok(())
    }

    async fn dead_letters(&self) -> Result<u64, String> {
        let dead = idempotency_queue::rabbitmq::dead_letter_name(&self.queue);
        Ok(u64::from(self.messages_in(&dead).await?))
    }

    /// Waits until the broker has delivered every message, then stops the service with SIGTERM:
    /// a graceful stop finishes and acks the deliveries in hand, so none is left.
    async fn drain_and_stop(&self, service: Service) -> Result<(), String> {
        let deadline = Instant::now() + PATIENCE;
        while self.messages_in(&self.queue).await? > 0 {
            if Instant::now() > deadline {
                return Err(format!("messages still undelivered after {PATIENCE:?}"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (status, output) = service.terminate(PATIENCE).await?;
        if !status.success() {
            return Err(format!("the service exited with {status}: {output:#?}"));
        }
        match self.messages_in(&self.queue).await? {
            0 => Ok(()),
            left => Err(format!(
                "{left} deliveries unacked; the service's last lines: {output:#?}"
            )),
        }
    }
}

coupon_grants::scenario_tests!(Drill);
