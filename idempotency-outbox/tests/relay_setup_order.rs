//! Setup order cannot kill messages: a relay started before its receiver declared the
//! destination (a RabbitMQ queue, a JetStream stream, an HTTP route) defers the messages
//! uncounted and delivers every one once the receiver appears; targets that declare their
//! destinations, and relays that refuse to start without them. Against real PostgreSQL
//! (`DATABASE_URL`), RabbitMQ (`AMQP_URL`) and NATS JetStream (`NATS_URL`).
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idempotency_outbox::table::OutboxTable;
use idempotency_outbox::{Outbox, OutboxMessage};
use idempotency_outbox::{Relay, Target};
use idempotency_queue::Backoff;
use sqlx::Postgres;
use support::{enqueue_committed, fresh_outbox, message, unique, wait_until};

/// How long a test waits for an event before failing.
const LIMIT: Duration = Duration::from_secs(30);

/// `count` messages to `topic`.
fn messages(count: usize, topic: &str) -> Vec<OutboxMessage> {
    (0..count)
        .map(|n| message(&format!("S{n}"), topic))
        .collect()
}

/// A relay that would kill a refused message at its first refusal, retrying quickly: only
/// deferral keeps a message without a destination alive. The returned counter counts the
/// batches it delivered (the `after_deliver` hook).
fn impatient<T: Target>(
    outbox: &Outbox<Postgres>,
    target: T,
) -> (Relay<Outbox<Postgres>, T>, Arc<AtomicUsize>) {
    let batches = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&batches);
    let relay = Relay::new(outbox.clone(), target)
        .with_max_attempts(1)
        .with_poll_interval(Duration::from_millis(20))
        .with_backoff(Backoff::new(
            Duration::from_millis(10),
            Duration::from_millis(50),
        ))
        .with_after_deliver(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
        });
    (relay, batches)
}

/// Runs `relay` until `tries` batches were delivered to a target without the destination,
/// then checks that nothing went dead or was sent; the running relay.
async fn relay_before_receiver<T: Target>(
    relay: Relay<Outbox<Postgres>, T>,
    batches: &AtomicUsize,
    outbox: &Outbox<Postgres>,
    count: usize,
) -> tokio::task::JoinHandle<()> {
    let running = tokio::spawn(async move { relay.run().await });
    wait_until("the relay to try twice", LIMIT, || async {
        batches.load(Ordering::SeqCst) >= 2
    })
    .await;
    let counts = outbox.counts().await.unwrap();
    assert_eq!(
        (counts.pending, counts.sent, counts.dead),
        (count as u64, 0, 0),
        "deferred, not counted toward dead"
    );
    running
}

/// Waits until every one of `count` messages is marked sent.
async fn all_sent(outbox: &Outbox<Postgres>, count: usize) {
    wait_until("every message sent", LIMIT, || async {
        let counts = outbox.counts().await.unwrap();
        counts.sent == count as u64
    })
    .await;
    let counts = outbox.counts().await.unwrap();
    assert_eq!((counts.pending, counts.dead), (0, 0));
}

#[cfg(feature = "rabbitmq")]
mod rabbitmq {
    use std::collections::HashMap;

    use idempotency_outbox::rabbitmq::RabbitMqTarget;
    use lapin::options::{
        BasicGetOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, QueueDeclareOptions,
        QueueDeleteOptions,
    };
    use lapin::types::FieldTable;
    use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};
    use support::amqp_url;

    use super::*;

    async fn channel() -> Option<(Connection, Channel)> {
        match Connection::connect(&amqp_url(), ConnectionProperties::default()).await {
            Ok(connection) => {
                let channel = connection.create_channel().await.unwrap();
                Some((connection, channel))
            }
            Err(error) => idempotency_test::unavailable("RabbitMQ", error),
        }
    }

    /// The consumer's declaration of `queue`, as the README's consumer recipe does it.
    async fn declare(channel: &Channel, queue: &str) {
        channel
            .queue_declare(
                queue.into(),
                QueueDeclareOptions::durable(),
                FieldTable::default(),
            )
            .await
            .unwrap();
    }

    /// Takes every message in `queue`: how many copies of each message id.
    async fn take_all(channel: &Channel, queue: &str) -> HashMap<String, usize> {
        let mut copies = HashMap::new();
        while let Some(got) = channel
            .basic_get(queue.into(), BasicGetOptions { no_ack: true })
            .await
            .unwrap()
        {
            let id = got.delivery.properties.message_id().as_ref().unwrap();
            *copies.entry(id.to_string()).or_default() += 1;
        }
        copies
    }

    fn exactly_once(copies: &HashMap<String, usize>, messages: &[OutboxMessage]) {
        assert_eq!(copies.len(), messages.len());
        for message in messages {
            assert_eq!(copies.get(&message.id), Some(&1), "{}", message.key);
        }
    }

    /// The relay starts before the consumer has declared its queue: the broker returns every
    /// message unroutable, the relay defers them uncounted (with one allowed attempt they would
    /// be dead at once), and once the consumer declares the queue every message arrives once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_relay_started_before_its_consumer_delivers_every_message_once_it_appears() {
        let Some((_connection, channel)) = channel().await else {
            return;
        };
        let Some(outbox) = fresh_outbox().await else {
            return;
        };
        let queue = unique("outbox_late_consumer");
        let sent = messages(20, &queue);
        enqueue_committed(&outbox, &sent).await;
        let (relay, batches) = impatient(&outbox, RabbitMqTarget::new(amqp_url(), ""));
        let running = relay_before_receiver(relay, &batches, &outbox, sent.len()).await;

        declare(&channel, &queue).await;
        all_sent(&outbox, sent.len()).await;
        running.abort();
        exactly_once(&take_all(&channel, &queue).await, &sent);
        channel
            .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
            .await
            .unwrap();
    }

    /// Past the relay's destination grace an unroutable message counts like any refusal.
    #[tokio::test]
    async fn past_the_grace_an_unroutable_message_counts_toward_dead() {
        let Some(outbox) = fresh_outbox().await else {
            return;
        };
        enqueue_committed(&outbox, &messages(1, &unique("outbox_never"))).await;
        let relay = Relay::new(outbox.clone(), RabbitMqTarget::new(amqp_url(), ""))
            .with_max_attempts(1)
            .with_destination_grace(Duration::ZERO);
        let round = relay.deliver_due().await.unwrap();
        assert_eq!((round.claimed, round.deferred, round.dead), (1, 0, 1));
        let dead = outbox.dead(10).await.unwrap();
        assert!(
            dead[0]
                .last_error
                .as_deref()
                .unwrap_or("")
                .contains("unroutable"),
            "{dead:?}"
        );
    }

    /// A target declaring its queues publishes through a named exchange with no consumer ever
    /// started: it declares a durable queue per topic and binds it, so every message is there
    /// once, and the relay's start check passes.
    #[tokio::test]
    async fn a_declaring_target_declares_and_binds_the_queue_of_each_topic() {
        let Some((_connection, channel)) = channel().await else {
            return;
        };
        let Some(outbox) = fresh_outbox().await else {
            return;
        };
        let exchange = unique("outbox_exchange");
        channel
            .exchange_declare(
                exchange.as_str().into(),
                ExchangeKind::Direct,
                ExchangeDeclareOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        let queue = unique("outbox_declared");
        let sent = messages(5, &queue);
        enqueue_committed(&outbox, &sent).await;
        let target = RabbitMqTarget::new(amqp_url(), exchange.as_str())
            .declaring_queues(FieldTable::default());
        target.prepare().await.unwrap();
        let relay = Relay::new(outbox.clone(), target).with_max_attempts(1);
        let round = relay.drain().await.unwrap();
        assert_eq!((round.sent, round.deferred, round.dead), (5, 0, 0));
        exactly_once(&take_all(&channel, &queue).await, &sent);
        channel
            .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
            .await
            .unwrap();
        channel
            .exchange_delete(exchange.as_str().into(), ExchangeDeleteOptions::default())
            .await
            .unwrap();
    }

    /// A relay told to require its queues refuses to start while one (or the exchange) is
    /// missing, naming each, and starts once they exist.
    #[tokio::test]
    async fn a_relay_requiring_its_queues_refuses_to_start_without_them() {
        let Some((_connection, channel)) = channel().await else {
            return;
        };
        let Some(outbox) = fresh_outbox().await else {
            return;
        };
        let (present, missing) = (unique("outbox_present"), unique("outbox_missing"));
        declare(&channel, &present).await;
        let relay = Relay::new(
            outbox.clone(),
            RabbitMqTarget::new(amqp_url(), "").requiring_queues([&present, &missing]),
        );
        let error = relay.try_run().await.unwrap_err();
        assert!(
            error.to_string().contains(&format!("queue {missing:?}")),
            "{error}"
        );
        assert!(!error.to_string().contains(&present), "{error}");

        let absent_exchange = unique("outbox_no_exchange");
        let target = RabbitMqTarget::new(amqp_url(), absent_exchange.as_str());
        let error = target.prepare().await.unwrap_err();
        assert!(error.to_string().contains(&absent_exchange), "{error}");

        declare(&channel, &missing).await;
        RabbitMqTarget::new(amqp_url(), "")
            .requiring_queues([&present, &missing])
            .prepare()
            .await
            .unwrap();
        for queue in [present, missing] {
            channel
                .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
                .await
                .unwrap();
        }
    }
}

#[cfg(feature = "nats")]
mod nats {
    use std::collections::HashSet;

    use async_nats::jetstream::{self, stream};
    use idempotency_outbox::nats::JetStreamTarget;
    use support::nats_url;

    use super::*;

    async fn jetstream() -> Option<jetstream::Context> {
        match async_nats::connect(nats_url()).await {
            Ok(client) => Some(jetstream::new(client)),
            Err(error) => idempotency_test::unavailable("NATS", error),
        }
    }

    fn config(name: &str, subject: &str) -> stream::Config {
        stream::Config {
            name: name.to_owned(),
            subjects: vec![subject.to_owned()],
            ..Default::default()
        }
    }

    /// The `Nats-Msg-Id` of every message in stream `name`.
    async fn stored_ids(js: &jetstream::Context, name: &str) -> Vec<String> {
        let stream = js.get_stream(name).await.unwrap();
        let count = stream.get_info().await.unwrap().state.messages;
        let mut ids = Vec::new();
        for sequence in 1..=count {
            let stored = stream.get_raw_message(sequence).await.unwrap();
            ids.push(
                stored
                    .headers
                    .get("Nats-Msg-Id")
                    .unwrap()
                    .as_str()
                    .to_owned(),
            );
        }
        ids
    }

    fn exactly_once(ids: &[String], messages: &[OutboxMessage]) {
        assert_eq!(ids.len(), messages.len(), "no copies");
        let ids: HashSet<&str> = ids.iter().map(String::as_str).collect();
        for message in messages {
            assert!(ids.contains(message.id.as_str()), "{}", message.key);
        }
    }

    /// The relay starts before any stream captures its subject (JetStream answers "no
    /// responders"): the messages are deferred uncounted, and once the consumer's side creates
    /// the stream every message is stored once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_relay_started_before_its_stream_delivers_every_message_once_it_appears() {
        let Some(js) = jetstream().await else {
            return;
        };
        let Some(outbox) = fresh_outbox().await else {
            return;
        };
        let name = unique("LATE");
        let subject = format!("outbox.late.{name}");
        let sent = messages(20, &subject);
        enqueue_committed(&outbox, &sent).await;
        let (relay, batches) = impatient(&outbox, JetStreamTarget::new(js.clone()));
        let running = relay_before_receiver(relay, &batches, &outbox, sent.len()).await;

        js.create_stream(config(&name, &subject)).await.unwrap();
        all_sent(&outbox, sent.len()).await;
        running.abort();
        exactly_once(&stored_ids(&js, &name).await, &sent);
        js.delete_stream(&name).await.unwrap();
    }

    /// A target creating its stream delivers with no stream beforehand; a relay requiring its
    /// subjects refuses to start while no stream captures one, naming it.
    #[tokio::test]
    async fn a_creating_target_creates_its_stream_and_a_requiring_one_refuses_to_start() {
        let Some(js) = jetstream().await else {
            return;
        };
        let Some(outbox) = fresh_outbox().await else {
            return;
        };
        let name = unique("MADE");
        let subject = format!("outbox.made.{name}");
        let relay = Relay::new(
            outbox.clone(),
            JetStreamTarget::new(js.clone()).requiring_subjects([subject.as_str()]),
        );
        let error = relay.try_run().await.unwrap_err();
        assert!(error.to_string().contains(&subject), "{error}");

        let sent = messages(5, &subject);
        enqueue_committed(&outbox, &sent).await;
        let relay = Relay::new(
            outbox.clone(),
            JetStreamTarget::new(js.clone()).creating_stream(config(&name, &subject)),
        )
        .with_max_attempts(1);
        let round = relay.drain().await.unwrap();
        assert_eq!((round.sent, round.deferred, round.dead), (5, 0, 0));
        exactly_once(&stored_ids(&js, &name).await, &sent);
        JetStreamTarget::new(js.clone())
            .requiring_subjects([subject.as_str()])
            .prepare()
            .await
            .unwrap();
        js.delete_stream(&name).await.unwrap();
    }
}

#[cfg(feature = "http")]
mod http {
    use std::sync::atomic::AtomicBool;

    use axum::Router;
    use axum::http::StatusCode;
    use axum::routing::post;
    use idempotency_outbox::http::HttpTarget;

    use super::*;

    /// The relay starts before the receiver deployed its route (404): the messages are
    /// deferred uncounted, and once the route answers every message is posted and accepted
    /// once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_relay_started_before_its_route_delivers_every_message_once_it_is_deployed() {
        let Some(outbox) = fresh_outbox().await else {
            return;
        };
        let deployed = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicUsize::new(0));
        let app = Router::new().route(
            "/grants",
            post({
                let (deployed, accepted) = (Arc::clone(&deployed), Arc::clone(&accepted));
                move || async move {
                    if !deployed.load(Ordering::SeqCst) {
                        return StatusCode::NOT_FOUND;
                    }
                    accepted.fetch_add(1, Ordering::SeqCst);
                    StatusCode::OK
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });

        let sent = messages(10, "/grants");
        enqueue_committed(&outbox, &sent).await;
        let (relay, batches) = impatient(&outbox, HttpTarget::new(base));
        let running = relay_before_receiver(relay, &batches, &outbox, sent.len()).await;

        deployed.store(true, Ordering::SeqCst);
        all_sent(&outbox, sent.len()).await;
        running.abort();
        assert_eq!(accepted.load(Ordering::SeqCst), sent.len());
    }
}
