//! The relay against real PostgreSQL (`DATABASE_URL`) and RabbitMQ (`AMQP_URL`): racing
//! relays, a relay killed with SIGKILL between publishing and marking sent, a cut broker
//! connection, refusals up to the dead state, and the LISTEN/NOTIFY wake-up.
#![cfg(all(feature = "postgres", feature = "rabbitmq"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::process::Stdio;
use std::time::Duration;

use idempotency_outbox::rabbitmq::RabbitMqTarget;
use idempotency_outbox::table::OutboxTable;
use idempotency_outbox::{Outbox, OutboxMessage};
use idempotency_outbox::{Relay, Round};
use idempotency_queue::Backoff;
use idempotency_test::{FaultProxy, LinkFault};
use lapin::options::{BasicGetOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ConnectionProperties};
use sqlx::Postgres;
use support::relay::{deliver_until_sent, refuse_until_dead};
use support::{amqp_url, enqueue_committed, fresh_outbox, message, unique, wait_until};
use tokio::io::{AsyncBufReadExt, BufReader};

/// Set in the child process of the kill test: the outbox table it relays.
const CHILD_TABLE: &str = "IDEM_OUTBOX_CHILD_TABLE";
/// What the child prints once the broker confirmed its batch, before marking it sent.
const DELIVERED: &str = "BATCH DELIVERED, NOT MARKED";

/// A PostgreSQL outbox and a RabbitMQ queue, both fresh.
struct Fixture {
    outbox: Outbox<Postgres>,
    channel: Channel,
    queue: String,
    _amqp: Connection,
}

impl Fixture {
    async fn new() -> Option<Self> {
        let amqp = match Connection::connect(&amqp_url(), ConnectionProperties::default()).await {
            Ok(connection) => connection,
            Err(error) => return idempotency_test::unavailable("RabbitMQ", error),
        };
        let outbox = fresh_outbox().await?;
        let channel = amqp.create_channel().await.unwrap();
        let queue = unique("outbox_queue");
        channel
            .queue_declare(
                queue.as_str().into(),
                QueueDeclareOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        Some(Self {
            outbox,
            channel,
            queue,
            _amqp: amqp,
        })
    }

    fn messages(&self, count: usize) -> Vec<OutboxMessage> {
        (0..count)
            .map(|n| message(&format!("T{n}"), &self.queue))
            .collect()
    }

    fn relay(&self) -> Relay<Outbox<Postgres>, RabbitMqTarget> {
        Relay::new(self.outbox.clone(), RabbitMqTarget::new(amqp_url(), ""))
    }

    /// Takes every message in the queue: how many copies of each message id.
    async fn take_all(&self) -> HashMap<String, usize> {
        let mut copies = HashMap::new();
        while let Some(got) = self
            .channel
            .basic_get(self.queue.as_str().into(), BasicGetOptions { no_ack: true })
            .await
            .unwrap()
        {
            let id = got.delivery.properties.message_id().as_ref().unwrap();
            *copies.entry(id.to_string()).or_default() += 1;
        }
        copies
    }

    async fn ready(&self) -> u32 {
        self.channel
            .queue_declare(
                self.queue.as_str().into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap()
            .message_count()
    }

    async fn delete_queue(&self) {
        self.channel
            .queue_delete(self.queue.as_str().into(), QueueDeleteOptions::default())
            .await
            .unwrap();
    }
}

/// Four relays drain one outbox at once, in small batches: every message reaches the queue
/// exactly once (the outbox side alone, with no receiver dedup), and all are marked sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_relays_never_deliver_one_message_twice() {
    let Some(fixture) = Fixture::new().await else {
        return;
    };
    let messages = fixture.messages(400);
    enqueue_committed(&fixture.outbox, &messages).await;
    let relays: Vec<_> = (0..4)
        .map(|_| {
            let relay = fixture.relay().with_batch_size(7);
            tokio::spawn(async move { relay.drain().await.unwrap() })
        })
        .collect();
    let mut total = Round::default();
    for relay in relays {
        let round = relay.await.unwrap();
        assert!(round.claimed > 0, "every relay took part: {round:?}");
        total += round;
    }
    assert_eq!((total.claimed, total.sent), (400, 400));
    let copies = fixture.take_all().await;
    assert_eq!(copies.len(), 400);
    for message in &messages {
        assert_eq!(copies.get(&message.id), Some(&1), "{}", message.key);
    }
    let counts = fixture.outbox.counts().await.unwrap();
    assert_eq!((counts.pending, counts.sent, counts.dead), (0, 400, 0));
    fixture.delete_queue().await;
}

#[cfg(any(feature = "mysql", feature = "sqlite"))]
/// Three relays drain `outbox` (holding `messages`, all to `fixture`'s queue) at once: each
/// message reaches the queue exactly once.
async fn relays_race<O: OutboxTable>(fixture: &Fixture, outbox: O, messages: &[OutboxMessage]) {
    let relays: Vec<_> = (0..3)
        .map(|_| {
            let relay =
                Relay::new(outbox.clone(), RabbitMqTarget::new(amqp_url(), "")).with_batch_size(5);
            tokio::spawn(async move { relay.drain().await.unwrap() })
        })
        .collect();
    let mut sent = 0;
    for relay in relays {
        sent += relay.await.unwrap().sent;
    }
    assert_eq!(sent, messages.len());
    let copies = fixture.take_all().await;
    assert_eq!(copies.len(), messages.len());
    for message in messages {
        assert_eq!(copies.get(&message.id), Some(&1), "{}", message.key);
    }
    assert_eq!(outbox.counts().await.unwrap().pending, 0);
}

#[cfg(any(feature = "mysql", feature = "sqlite"))]
/// The same race from a MySQL/MariaDB outbox (`MYSQL_URL`) and a SQLite one (features `mysql`,
/// `sqlite`).
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn racing_relays_deliver_once_from_mysql_and_sqlite() {
    let Some(fixture) = Fixture::new().await else {
        return;
    };
    let messages = fixture.messages(120);
    #[cfg(feature = "mysql")]
    if let Some(mysql) = support::holding::<Outbox<sqlx::MySql>>(&messages).await {
        relays_race(&fixture, mysql, &messages).await;
    }
    #[cfg(feature = "sqlite")]
    if let Some(sqlite) = support::holding::<Outbox<sqlx::Sqlite>>(&messages).await {
        relays_race(&fixture, sqlite, &messages).await;
    }
    fixture.delete_queue().await;
}

/// The child of the kill test: relays one batch with a lease of 2 s, announces it after the
/// broker confirmed it, and waits to be killed before marking it sent.
async fn child_relay(table: String) {
    let pool = sqlx::PgPool::connect(&support::database_url())
        .await
        .unwrap();
    let outbox = support::outbox_named(pool, &table).await.unwrap();
    let relay = Relay::new(outbox, RabbitMqTarget::new(amqp_url(), ""))
        .with_lease(Duration::from_secs(2))
        .with_after_deliver(|batch| {
            println!("{DELIVERED} {}", batch.len());
            // Blocks here until the parent's SIGKILL: the marks never run.
            std::thread::sleep(Duration::from_secs(600));
        });
    relay.deliver_due().await.unwrap();
    unreachable!("the parent kills this process before the batch is marked");
}

/// A relay process killed with SIGKILL after the broker confirmed its batch and before it
/// marked it sent: the messages stay pending, and once the dead relay's lease ends another relay
/// delivers them again, with the same message ids (the copies a receiver must drop), then marks
/// them sent. Nothing committed is lost.
#[tokio::test]
async fn a_relay_killed_between_publish_and_mark_sent_delivers_again_after_its_lease() {
    if let Ok(table) = std::env::var(CHILD_TABLE) {
        return child_relay(table).await;
    }
    let Some(fixture) = Fixture::new().await else {
        return;
    };
    let messages = fixture.messages(5);
    enqueue_committed(&fixture.outbox, &messages).await;
    let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_relay_killed_between_publish_and_mark_sent_delivers_again_after_its_lease",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_TABLE, fixture.outbox.table_name())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    loop {
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("the child relay announced its batch")
            .unwrap()
            .expect("the child relay exited before announcing its batch");
        // libtest may print the test's name on the same line first.
        if line.contains(DELIVERED) {
            assert!(line.ends_with(&format!("{DELIVERED} 5")), "{line}");
            break;
        }
    }
    child.start_kill().unwrap();
    let status = child.wait().await.unwrap();
    assert!(!status.success(), "the child was killed: {status}");

    // Published, confirmed, never marked: pending, and held by the dead relay's claim.
    let counts = fixture.outbox.counts().await.unwrap();
    assert_eq!((counts.pending, counts.sent), (5, 0));
    // Once the dead relay's lease ends, a surviving relay claims the batch and delivers it again.
    deliver_until_sent(&fixture.relay(), 5, Duration::from_secs(30)).await;
    let copies = fixture.take_all().await;
    for message in &messages {
        assert_eq!(copies.get(&message.id), Some(&2), "{}", message.key);
    }
    let counts = fixture.outbox.counts().await.unwrap();
    assert_eq!((counts.pending, counts.sent), (0, 5));
    fixture.delete_queue().await;
}

/// The broker connection cut under the relay (a fault proxy refuses it): the batch is given back
/// without counting a failure and nothing is marked; once the broker is back the relay connects
/// again and delivers everything once.
#[tokio::test]
async fn a_cut_broker_connection_gives_the_batch_back_uncounted() {
    let Some(fixture) = Fixture::new().await else {
        return;
    };
    let proxy = FaultProxy::start("127.0.0.1:5672").await.unwrap();
    let proxied = amqp_url().replacen("127.0.0.1:5672", &proxy.addr().to_string(), 1);
    let relay = Relay::new(fixture.outbox.clone(), RabbitMqTarget::new(proxied, ""));
    enqueue_committed(&fixture.outbox, &fixture.messages(3)).await;
    assert_eq!(relay.deliver_due().await.unwrap().sent, 3);

    proxy.set(LinkFault::Refuse);
    let late = [
        message("late-1", &fixture.queue),
        message("late-2", &fixture.queue),
    ];
    enqueue_committed(&fixture.outbox, &late).await;
    let round = relay.deliver_due().await.unwrap();
    assert_eq!((round.claimed, round.sent, round.unreachable), (2, 0, 2));
    assert_eq!(round.refused + round.dead, 0);

    proxy.set(LinkFault::None);
    let round = relay.drain().await.unwrap();
    assert_eq!(round.sent, 2);
    let copies = fixture.take_all().await;
    assert_eq!(copies.len(), 5);
    assert!(copies.values().all(|&n| n == 1), "{copies:?}");
    let counts = fixture.outbox.counts().await.unwrap();
    assert_eq!((counts.pending, counts.sent, counts.dead), (0, 5, 0));
    fixture.delete_queue().await;
}

/// Past the relay's destination grace, a message the broker cannot route (no queue for its
/// topic) is refused, retried after a backoff, and dead at the last allowed attempt: listed for operators with the reason, not
/// delivered again, until an operator revives it (here after binding its queue).
#[tokio::test]
async fn a_refused_message_goes_dead_and_an_operator_revives_it() {
    let Some(fixture) = Fixture::new().await else {
        return;
    };
    let nowhere = unique("outbox_nowhere");
    let lost = message("lost", &nowhere);
    enqueue_committed(&fixture.outbox, std::slice::from_ref(&lost)).await;
    let relay = fixture
        .relay()
        .with_max_attempts(3)
        .with_destination_grace(Duration::ZERO)
        .with_backoff(Backoff::new(
            Duration::from_millis(1),
            Duration::from_millis(1),
        ));
    let round = refuse_until_dead(&relay).await;
    assert_eq!((round.refused, round.dead), (2, 1));
    assert_eq!(
        relay.deliver_due().await.unwrap().claimed,
        0,
        "dead stays dead"
    );
    let listed = fixture.outbox.dead(10).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].message, lost);
    assert_eq!(listed[0].attempts, 3);
    assert!(
        listed[0]
            .last_error
            .as_deref()
            .unwrap_or("")
            .contains("unroutable")
    );

    fixture
        .channel
        .queue_declare(
            nowhere.as_str().into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    assert!(fixture.outbox.revive(&lost.id).await.unwrap());
    assert!(
        !fixture.outbox.revive(&lost.id).await.unwrap(),
        "only dead messages revive"
    );
    assert_eq!(relay.drain().await.unwrap().sent, 1);
    let counts = fixture.outbox.counts().await.unwrap();
    assert_eq!((counts.pending, counts.sent, counts.dead), (0, 1, 0));
    fixture
        .channel
        .queue_delete(nowhere.as_str().into(), QueueDeleteOptions::default())
        .await
        .unwrap();
    fixture.delete_queue().await;
}

/// A running relay on PostgreSQL sleeps on LISTEN, not on a poll: with polling set to an hour,
/// a message committed while it idles is delivered well before the relay's 30 s bound on an
/// idle wait.
#[tokio::test]
async fn an_enqueue_wakes_a_listening_relay() {
    let Some(fixture) = Fixture::new().await else {
        return;
    };
    let relay = fixture
        .relay()
        .with_poll_interval(Duration::from_secs(3600));
    let running = tokio::spawn(async move { relay.run().await });
    // Let the relay find the outbox empty and go to sleep.
    tokio::time::sleep(Duration::from_millis(500)).await;
    enqueue_committed(&fixture.outbox, &fixture.messages(1)).await;
    wait_until(
        "the woken relay's delivery",
        Duration::from_secs(15),
        || async { fixture.ready().await == 1 },
    )
    .await;
    running.abort();
    fixture.delete_queue().await;
}
