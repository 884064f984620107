//! The relay against real PostgreSQL (`DATABASE_URL`) and NATS JetStream (`NATS_URL`): the
//! message id as `Nats-Msg-Id`, a batch delivered again after a relay died before marking it
//! (the stream drops the copies), racing relays, a subject without a stream, and a broker
//! restart (a private `nats-server` killed and started again).
#![cfg(all(feature = "postgres", feature = "nats"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, stream};
use idempotency_outbox::nats::JetStreamTarget;
use idempotency_outbox::table::OutboxTable;
use idempotency_outbox::{Outbox, OutboxMessage};
use idempotency_outbox::{Relay, Round};
use idempotency_queue::Backoff;
use sqlx::Postgres;
use support::relay::{deliver_until_sent, refuse_until_dead};
use support::{enqueue_committed, fresh_outbox, message, nats_url, unique};

/// A PostgreSQL outbox and a fresh JetStream stream.
struct Fixture {
    outbox: Outbox<Postgres>,
    js: jetstream::Context,
    name: String,
    subject: String,
}

impl Fixture {
    async fn new() -> Option<Self> {
        let client = match async_nats::connect(nats_url()).await {
            Ok(client) => client,
            Err(error) => return idempotency_test::unavailable("NATS", error),
        };
        let outbox = fresh_outbox().await?;
        let js = jetstream::new(client);
        let name = unique("OUTBOX");
        let subject = format!("outbox.test.{name}");
        js.create_stream(stream::Config {
            name: name.clone(),
            subjects: vec![subject.clone()],
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        })
        .await
        .unwrap();
        Some(Self {
            outbox,
            js,
            name,
            subject,
        })
    }

    fn messages(&self, count: usize) -> Vec<OutboxMessage> {
        (0..count)
            .map(|n| message(&format!("N{n}"), &self.subject))
            .collect()
    }

    fn relay(&self) -> Relay<Outbox<Postgres>, JetStreamTarget> {
        Relay::new(self.outbox.clone(), JetStreamTarget::new(self.js.clone()))
    }

    /// The `Nats-Msg-Id` of every message in the stream.
    async fn stored_ids(&self) -> Vec<String> {
        let stream = self.js.get_stream(&self.name).await.unwrap();
        let count = stream.get_info().await.unwrap().state.messages;
        let mut ids = Vec::new();
        for sequence in 1..=count {
            let stored = stream.get_raw_message(sequence).await.unwrap();
            let id = stored.headers.get("Nats-Msg-Id").unwrap();
            ids.push(id.as_str().to_owned());
        }
        ids
    }

    async fn cleanup(self) {
        self.js.delete_stream(&self.name).await.unwrap();
    }
}

/// A relay dies after JetStream acked its batch and before marking it (the documented
/// `after_deliver` hook panics there, ending the relay's task); once its lease ends another
/// relay delivers the batch again with the same `Nats-Msg-Id`s, and the stream keeps one copy
/// of each.
#[tokio::test]
async fn a_batch_delivered_again_after_a_dead_relay_is_stored_once_by_the_stream() {
    let Some(fixture) = Fixture::new().await else {
        return;
    };
    let messages = fixture.messages(10);
    enqueue_committed(&fixture.outbox, &messages).await;
    let doomed = fixture
        .relay()
        .with_lease(Duration::from_secs(1))
        .with_after_deliver(|_| panic!("the relay dies between delivering and marking"));
    let died = tokio::spawn(async move { doomed.deliver_due().await }).await;
    assert!(died.unwrap_err().is_panic());
    let counts = fixture.outbox.counts().await.unwrap();
    assert_eq!((counts.pending, counts.sent), (10, 0));

    deliver_until_sent(&fixture.relay(), 10, Duration::from_secs(30)).await;
    let stored = fixture.stored_ids().await;
    let expected: Vec<String> = messages.iter().map(|m| m.id.clone()).collect();
    assert_eq!(stored, expected, "one copy each, in enqueue order");
    fixture.cleanup().await;
}

/// Three relays drain one outbox at once: every message is claimed and sent by exactly one of
/// them (counted on the outbox side), and the stream holds each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn racing_relays_claim_disjoint_batches() {
    let Some(fixture) = Fixture::new().await else {
        return;
    };
    let messages = fixture.messages(150);
    enqueue_committed(&fixture.outbox, &messages).await;
    let relays: Vec<_> = (0..3)
        .map(|_| {
            let relay = fixture.relay().with_batch_size(5);
            tokio::spawn(async move { relay.drain().await.unwrap() })
        })
        .collect();
    let mut total = Round::default();
    for relay in relays {
        total += relay.await.unwrap();
    }
    assert_eq!((total.claimed, total.sent), (150, 150));
    let stored: HashSet<String> = fixture.stored_ids().await.into_iter().collect();
    assert_eq!(stored.len(), 150);
    fixture.cleanup().await;
}

/// Past the relay's destination grace, a subject no stream captures is refused (not
/// unreachable): counted, and dead at the last attempt.
#[tokio::test]
async fn a_subject_without_a_stream_past_the_grace_is_refused_until_dead() {
    let Some(fixture) = Fixture::new().await else {
        return;
    };
    let stray = message("stray", &format!("outbox.nowhere.{}", unique("s")));
    enqueue_committed(&fixture.outbox, std::slice::from_ref(&stray)).await;
    let relay = fixture
        .relay()
        .with_max_attempts(2)
        .with_destination_grace(Duration::ZERO)
        .with_backoff(Backoff::new(
            Duration::from_millis(1),
            Duration::from_millis(1),
        ));
    let total = refuse_until_dead(&relay).await;
    assert_eq!((total.refused, total.dead, total.unreachable), (1, 1, 0));
    let dead = fixture.outbox.dead(10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].message.id, stray.id);
    fixture.cleanup().await;
}

/// A private JetStream server (`nats-server` on a free loopback port, its own store), started
/// and killed by this test; the shared server is never touched.
struct PrivateServer {
    port: u16,
    dir: std::path::PathBuf,
    process: Option<tokio::process::Child>,
}

impl PrivateServer {
    /// Starts one (`None`: no `nats-server` binary, skipped outside CI).
    async fn start() -> Option<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = std::env::temp_dir().join(unique("outbox-nats"));
        let mut server = Self {
            port,
            dir,
            process: None,
        };
        if let Err(error) = server.restart().await {
            return idempotency_test::unavailable("nats-server", error);
        }
        Some(server)
    }

    /// Starts the server process (again, on the same port and store) and waits until it
    /// accepts connections.
    async fn restart(&mut self) -> std::io::Result<()> {
        let process = tokio::process::Command::new("nats-server")
            .args([
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-sd",
            ])
            .arg(&self.dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        self.process = Some(process);
        let deadline = Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .is_err()
        {
            if Instant::now() > deadline {
                return Err(std::io::Error::other("nats-server did not start"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// Kills the server process (SIGKILL) and waits for it.
    async fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.kill().await.unwrap();
        }
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        if let Some(process) = &mut self.process {
            let _ = process.start_kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The broker restarted under a relay (a private server killed, then started again on the same
/// store): messages enqueued while it is down are given back uncounted, and once it is back the
/// relay's client reconnects and delivers them; the stream holds every message once.
#[tokio::test]
async fn a_restarted_broker_loses_nothing_and_stores_nothing_twice() {
    let Some(outbox) = fresh_outbox().await else {
        return;
    };
    let Some(mut server) = PrivateServer::start().await else {
        return;
    };
    let client = async_nats::connect(server.url()).await.unwrap();
    let mut js = jetstream::new(client);
    js.set_timeout(Duration::from_secs(1));
    let subject = "outbox.restart.grants";
    js.create_stream(stream::Config {
        name: "OUTBOX_RESTART".to_owned(),
        subjects: vec![subject.to_owned()],
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    })
    .await
    .unwrap();
    let relay = Relay::new(outbox.clone(), JetStreamTarget::new(js.clone()));
    let before: Vec<_> = (0..3).map(|n| message(&format!("B{n}"), subject)).collect();
    enqueue_committed(&outbox, &before).await;
    assert_eq!(relay.drain().await.unwrap().sent, 3);

    server.kill().await;
    let during: Vec<_> = (0..3).map(|n| message(&format!("D{n}"), subject)).collect();
    enqueue_committed(&outbox, &during).await;
    let round = relay.deliver_due().await.unwrap();
    assert_eq!((round.claimed, round.sent), (3, 0));
    assert_eq!(round.unreachable, 3, "{round:?}");
    assert_eq!(round.refused + round.dead, 0);

    server.restart().await.unwrap();
    deliver_until_sent(&relay, 3, Duration::from_secs(60)).await;
    let stream = js.get_stream("OUTBOX_RESTART").await.unwrap();
    assert_eq!(stream.get_info().await.unwrap().state.messages, 6);
    let counts = outbox.counts().await.unwrap();
    assert_eq!((counts.pending, counts.sent, counts.dead), (0, 6, 0));
}
