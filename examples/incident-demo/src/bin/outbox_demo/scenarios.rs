//! The rows of the demo's table: one trade each, the gateway's six callbacks, one crash at one
//! boundary, then the surviving services until everything settled.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idempotency_outbox::OutboxTable;
use idempotency_test::{FaultProxy, LinkFault};
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ConnectionProperties};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::Error;
use crate::services::{self, CRASH_POINT};
use crate::setup::{CouponsDb, OrdersDb, RUN_ENV, Run, amqp_url};

/// How many times the gateway calls back per trade (the post-mortem's six).
const CALLBACKS: usize = 6;
/// The longest a row may take to settle, or a child to reach its crash point.
const LIMIT: Duration = Duration::from_secs(90);

/// Where a row's crash happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Crash {
    /// No crash: only the gateway's repeated callbacks.
    None,
    /// The callback service dies after the transition and the enqueue, before its commit.
    CallbackBeforeCommit,
    /// The relay dies after the broker confirmed the message, before marking it sent.
    RelayAfterPublish,
    /// The coupon service dies after committing the coupon, before acking the delivery.
    ConsumerAfterCommit,
    /// Every broker connection is reset and refused for a second (a broker restart).
    BrokerCut,
}

impl Crash {
    /// Every row, in the table's order.
    pub(crate) const ALL: [Crash; 5] = [
        Crash::None,
        Crash::CallbackBeforeCommit,
        Crash::RelayAfterPublish,
        Crash::ConsumerAfterCommit,
        Crash::BrokerCut,
    ];

    /// The row's label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Crash::None => "none: the gateway's 6 callbacks",
            Crash::CallbackBeforeCommit => "callback service killed before its commit",
            Crash::RelayAfterPublish => "relay killed after publishing, before marking sent",
            Crash::ConsumerAfterCommit => "coupon service killed after its commit, before its ack",
            Crash::BrokerCut => "broker connections cut (reset, refused for 1 s)",
        }
    }
}

/// What one row left behind.
#[derive(Clone, Debug)]
pub(crate) struct Outcome {
    /// Callbacks (of six) whose transaction enqueued the grant.
    pub(crate) enqueued: usize,
    /// Copies the surviving coupon service received and dropped as duplicates.
    pub(crate) dropped: u64,
    /// Coupons the trade got.
    pub(crate) coupons: i64,
}

/// The services' shared handles of one run.
pub(crate) struct Ctx {
    pub(crate) run: Run,
    pub(crate) orders: OrdersDb,
    pub(crate) coupons: CouponsDb,
    channel: Channel,
    _amqp: Connection,
}

impl Ctx {
    /// Handles on the run's databases and queue (created by `setup::create`).
    pub(crate) async fn new(run: Run, orders: OrdersDb, coupons: CouponsDb) -> Result<Self, Error> {
        let amqp = Connection::connect(&amqp_url(), ConnectionProperties::default()).await?;
        let channel = amqp.create_channel().await?;
        Ok(Self {
            run,
            orders,
            coupons,
            channel,
            _amqp: amqp,
        })
    }

    /// The queue's ready messages and consumers.
    async fn queue(&self) -> Result<(u32, u32), Error> {
        let queue = self
            .channel
            .queue_declare(
                self.run.queue().as_str().into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await?;
        Ok((queue.message_count(), queue.consumer_count()))
    }
}

/// Runs one row for `trade`.
pub(crate) async fn row(ctx: &Ctx, crash: Crash, trade: &str) -> Result<Outcome, Error> {
    let mut settle_url = amqp_url();
    let enqueued = match crash {
        Crash::None => gateway(ctx, trade).await?,
        Crash::CallbackBeforeCommit => {
            killed_at_crash_point(&ctx.run, &["callback", trade]).await?;
            gateway(ctx, trade).await?
        }
        Crash::RelayAfterPublish => {
            let enqueued = gateway(ctx, trade).await?;
            killed_at_crash_point(&ctx.run, &["relay", "--die-after-publish"]).await?;
            enqueued
        }
        Crash::ConsumerAfterCommit => {
            let enqueued = gateway(ctx, trade).await?;
            // The relay runs until the coupon service died: one pass could give the message back
            // (a slow broker) and leave the child nothing to consume.
            let relay = services::relay(&ctx.orders, amqp_url(), false);
            let relaying = tokio::spawn(async move { relay.run().await });
            let killed = killed_at_crash_point(&ctx.run, &["coupons", "--die-after-commit"]).await;
            relaying.abort();
            killed?;
            enqueued
        }
        Crash::BrokerCut => {
            let proxy = FaultProxy::start(broker_addr()?).await?;
            settle_url = amqp_url().replacen(&broker_addr()?, &proxy.addr().to_string(), 1);
            let relay = services::relay(&ctx.orders, settle_url.clone(), false);
            let relaying = tokio::spawn(async move { relay.run().await });
            let consumer = Arc::new(services::coupon_consumer(&ctx.coupons, false)?);
            let session = services::consume(consumer, &ctx.run, &settle_url).await?;
            let enqueued = gateway(ctx, trade).await?;
            proxy.set(LinkFault::Refuse);
            tokio::time::sleep(Duration::from_secs(1)).await;
            proxy.set(LinkFault::None);
            relaying.abort();
            // The session's connection was reset: its consume loop has ended or ends now.
            let _ = session.task.await;
            drop(session.connection);
            let dropped = settle(ctx, trade, &settle_url).await?;
            return Ok(Outcome {
                enqueued,
                dropped,
                coupons: ctx.coupons.coupons_of(trade).await?,
            });
        }
    };
    let dropped = settle(ctx, trade, &settle_url).await?;
    Ok(Outcome {
        enqueued,
        dropped,
        coupons: ctx.coupons.coupons_of(trade).await?,
    })
}

/// `host:port` of the broker in `AMQP_URL`.
fn broker_addr() -> Result<String, Error> {
    let url = amqp_url();
    let rest = url.split_once("://").map_or(url.as_str(), |(_, rest)| rest);
    let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    let host = host.split('/').next().unwrap_or(host);
    if host.contains(':') {
        Ok(host.to_owned())
    } else {
        Ok(format!("{host}:5672"))
    }
}

/// The gateway's six callbacks for `trade`, all at once: how many enqueued the grant.
async fn gateway(ctx: &Ctx, trade: &str) -> Result<usize, Error> {
    let calls = (0..CALLBACKS).map(|_| services::callback(&ctx.orders, &ctx.run, trade, false));
    let mut enqueued = 0;
    for result in futures_util::future::join_all(calls).await {
        enqueued += usize::from(result?);
    }
    Ok(enqueued)
}

/// Starts this program as a child in `role`, waits until it prints its crash point, then kills
/// it with SIGKILL.
async fn killed_at_crash_point(run: &Run, role: &[&str]) -> Result<(), Error> {
    let mut child = tokio::process::Command::new(std::env::current_exe()?)
        .args(role)
        .env(RUN_ENV, &run.id)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| Error::Usage("the child's stdout is not piped".to_owned()))?;
    let mut lines = BufReader::new(stdout).lines();
    let reached = tokio::time::timeout(LIMIT, async {
        while let Some(line) = lines.next_line().await? {
            if line.contains(CRASH_POINT) {
                return Ok::<bool, std::io::Error>(true);
            }
        }
        Ok(false)
    })
    .await
    .map_err(|_| Error::Stuck(format!("{role:?} never reached its crash point")))??;
    if !reached {
        return Err(Error::Stuck(format!(
            "{role:?} exited before its crash point"
        )));
    }
    child.start_kill()?;
    child.wait().await?;
    Ok(())
}

/// Runs a healthy relay and coupon service until the row is settled, then stops them; how many
/// copies the coupon service dropped as duplicates meanwhile.
///
/// Settled is an event, not a quiet period: no dead consumer holds a delivery (the broker has
/// requeued what a killed service held), the trade has its coupon, the outbox has nothing
/// pending and the queue nothing ready; then the coupon service stops gracefully, finishing and
/// acking what it holds. If that stop left anything (a requeued failure, a late copy), another
/// round runs.
async fn settle(ctx: &Ctx, trade: &str, amqp_url: &str) -> Result<u64, Error> {
    let deadline = Instant::now() + LIMIT;
    let consumer = Arc::new(services::coupon_consumer(&ctx.coupons, false)?);
    loop {
        while ctx.queue().await?.1 > 0 {
            wait_until(deadline).await?;
        }
        if ctx.orders.outbox.counts().await?.pending == 0
            && ctx.queue().await?.0 == 0
            && ctx.coupons.coupons_of(trade).await? >= 1
        {
            break;
        }
        let relay = services::relay(&ctx.orders, amqp_url.to_owned(), false);
        let relaying = tokio::spawn(async move { relay.run().await });
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let consuming = services::consume_until(Arc::clone(&consumer), &ctx.run, amqp_url, async {
            let _ = stopped.await;
        });
        let watching = async {
            loop {
                wait_until(deadline).await?;
                if ctx.orders.outbox.counts().await?.pending == 0
                    && ctx.queue().await?.0 == 0
                    && ctx.coupons.coupons_of(trade).await? >= 1
                {
                    let _ = stop.send(());
                    return Ok::<(), Error>(());
                }
            }
        };
        let (consumed, watched) = tokio::join!(consuming, watching);
        relaying.abort();
        watched?;
        consumed?;
    }
    let stats = consumer.stats().snapshot();
    Ok(stats.replayed + stats.already_done)
}

/// One poll interval, or [`Error::Stuck`] past `deadline`.
async fn wait_until(deadline: Instant) -> Result<(), Error> {
    if Instant::now() > deadline {
        return Err(Error::Stuck("the services did not settle".to_owned()));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(())
}
