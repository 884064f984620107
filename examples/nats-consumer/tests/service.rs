//! The NATS JetStream coupon service driven from outside: the service (`queue_nats`) and the
//! gateway (`nats_publish`) run as processes of their own against the real NATS server,
//! PostgreSQL and Redis, through the drill's scenarios (`coupon_grants::drill::scenarios`):
//! SIGKILL before the commit and after it (before the ack), two replicas, a cut server
//! connection. After each, every trade has exactly one coupon and every message was acked.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use coupon_grants::drill::scenarios::{Deployment, PATIENCE};
use coupon_grants::drill::{Service, Trades, unavailable};

const SERVICE: &str = env!("CARGO_BIN_EXE_queue_nats");
const PRODUCER: &str = env!("CARGO_BIN_EXE_nats_publish");

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
        let database_url = std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| coupon_grants::DEFAULT_DATABASE_URL.to_owned());
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

    fn stream(&self) -> String {
        nats_consumer::stream_name(&self.subject)
    }

    /// Messages of the stream not yet delivered, or delivered and not acked.
    async fn unsettled(&self) -> Result<u64, String> {
        let stream = self
            .js
            .get_stream(self.stream())
            .await
            .map_err(|e| e.to_string())?;
        let mut consumer: jetstream::consumer::PullConsumer = stream
            .get_consumer("coupon-grants")
            .await
            .map_err(|e| e.to_string())?;
        let info = consumer.info().await.map_err(|e| e.to_string())?;
        Ok(info.num_pending + u64::try_from(info.num_ack_pending).unwrap_or(u64::MAX))
    }

    async fn cleanup(self) {
        let _ = self.js.delete_stream(self.stream()).await;
        let _ = self
            .js
            .delete_stream(format!("{}_DEAD", self.stream()))
            .await;
    }
}

impl Deployment for Drill {
    fn trades(&self) -> &Trades {
        &self.trades
    }

    fn broker_url(&self) -> &str {
        &self.nats_url
    }

    fn broker_addr(&self) -> String {
        let address = self.nats_url.trim_start_matches("nats://");
        address.trim_end_matches('/').to_owned()
    }

    fn url_at(&self, addr: SocketAddr) -> String {
        format!("nats://{addr}")
    }

    fn start_via(&self, broker_url: &str, vars: &[(&str, &str)]) -> std::io::Result<Service> {
        let mut all = vec![
            ("QUEUE", self.subject.as_str()),
            ("NATS_URL", broker_url),
            ("DATABASE_URL", self.database_url.as_str()),
        ];
        all.extend_from_slice(vars);
        Service::start(SERVICE, &all)
    }

    fn publish(&self, trades: u32, copies: u32) -> Result<(), String> {
        let vars = [
            ("QUEUE", self.subject.as_str()),
            ("NATS_URL", &self.nats_url),
        ];
        self.trades.publish(PRODUCER, trades, copies, &vars)
    }

    async fn publish_raw(&self, payload: &'static [u8]) -> Result<(), String> {
        let ack = self
            .js
            .publish(self.subject.clone(), payload.into())
            .await
            .map_err(|error| error.to_string())?;
        ack.await.map_err(|error| error.to_string())?;
        Ok(())
    }

    async fn dead_letters(&self) -> Result<u64, String> {
        let dead = format!("{}_DEAD", self.stream());
        let Ok(mut stream) = self.js.get_stream(dead).await else {
            return Ok(0);
        };
        let info = stream.info().await.map_err(|error| error.to_string())?;
        Ok(info.state.messages)
    }

    /// Waits until every message was acked (JetStream counts them), then stops the service.
    async fn drain_and_stop(&self, service: Service) -> Result<(), String> {
        let deadline = Instant::now() + PATIENCE;
        while self.unsettled().await? > 0 {
            if Instant::now() > deadline {
                return Err(format!("messages still unacked after {PATIENCE:?}"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (status, output) = service.terminate(PATIENCE).await?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("the service exited with {status}: {output:#?}"))
        }
    }
}

coupon_grants::scenario_tests!(Drill);
