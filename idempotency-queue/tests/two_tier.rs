//! Two tiers against real services: Redis (fast path), PostgreSQL (truth), RabbitMQ (deliveries).
//!
//! The business table has no unique constraint on the business key, so a second execution would
//! show up as a second row: every test counts rows.
#![cfg(all(feature = "rabbitmq", feature = "sql"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
#[allow(dead_code)] // The round-trip count's proxied fast tier serves `round_trips.rs`.
mod tiers;

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use idempotency_core::{Fingerprint, IdempotencyKey, Mechanism, Scope, Store};
use idempotency_queue::two_tier::{Json, SqlTruth, TwoTier, Tx};
use idempotency_queue::{
    Action, Backoff, Handled, Header, IdempotentConsumer, Job, JsonField, Message, RejectReason,
    Verdict, rabbitmq,
};
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, QueueDeclareOptions,
    QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use support::{unique, wait_until};
use tiers::Tiers;
use tokio::io::{AsyncBufReadExt, BufReader};

const LIMIT: Duration = Duration::from_secs(90);
/// The Redis database the flush test empties; nothing else should live there.
const FLUSHED_DB: u8 = 9;

fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

/// Everything one test needs, under names no other test uses: the tiers and a queue.
struct Fixture {
    tiers: Tiers,
    amqp: Connection,
    channel: Channel,
    queue: String,
}

impl Fixture {
    async fn new(redis_db: u8) -> Option<Self> {
        let amqp = match Connection::connect(&amqp_url(), ConnectionProperties::default()).await {
            Ok(connection) => connection,
            Err(error) => return idempotency_test::unavailable("RabbitMQ", error),
        };
        let tiers = Tiers::new(redis_db, "idem-two-tier").await?;
        let channel = amqp.create_channel().await.unwrap();
        let queue = unique("idem-two-tier");
        channel
            .queue_declare(
                queue.as_str().into(),
                QueueDeclareOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        Some(Self {
            tiers,
            amqp,
            channel,
            queue,
        })
    }

    /// The fixture of a child process, from the parent's environment.
    async fn from_env() -> Self {
        let amqp = Connection::connect(&amqp_url(), ConnectionProperties::default())
            .await
            .unwrap();
        Self {
            tiers: Tiers::from_env().await,
            channel: amqp.create_channel().await.unwrap(),
            amqp,
            queue: std::env::var("IDEM_QUEUE").unwrap(),
        }
    }

    async fn publish(&self, key: &str) {
        let mut headers = FieldTable::default();
        headers.insert(
            "business-key".into(),
            AMQPValue::LongString(LongString::from(key)),
        );
        self.channel
            .basic_publish(
                "".into(),
                self.queue.as_str().into(),
                BasicPublishOptions::default(),
                format!("grant a coupon for {key}").as_bytes(),
                BasicProperties::default().with_headers(headers),
            )
            .await
            .unwrap()
            .await
            .unwrap();
    }

    async fn deliveries(&self, connection: &Connection) -> lapin::Consumer {
        let channel = connection.create_channel().await.unwrap();
        channel
            .basic_qos(16, BasicQosOptions::default())
            .await
            .unwrap();
        channel
            .basic_consume(
                self.queue.as_str().into(),
                unique("consumer").as_str().into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap()
    }

    async fn cleanup(self) {
        self.channel
            .queue_delete(self.queue.as_str().into(), QueueDeleteOptions::default())
            .await
            .unwrap();
        self.tiers.drop_tables().await;
        let _ = self.amqp.close(200, "done".into()).await;
    }
}

#[tokio::test]
async fn a_redis_flush_mid_run_costs_queries_never_a_second_execution() {
    let Some(fixture) = Fixture::new(FLUSHED_DB).await else {
        return;
    };
    let consumer = Arc::new(
        TwoTier::new(fixture.tiers.truth())
            .consumer(fixture.tiers.fast_path().await, Header::new("business-key"))
            .unwrap()
            .with_backoff(Backoff::new(
                Duration::from_millis(50),
                Duration::from_millis(500),
            )),
    );
    let keys: Vec<String> = (0..20).map(|n| format!("T{n}")).collect();
    let connection = Connection::connect(&amqp_url(), ConnectionProperties::default())
        .await
        .unwrap();
    let deliveries = fixture.deliveries(&connection).await;
    let running = Arc::clone(&consumer);
    let task = tokio::spawn(async move {
        let _ = rabbitmq::serve(&running, deliveries, &rabbitmq::DeadLetters::drop_and_log())
            .concurrency(8)
            .await;
    });

    // Round 1: every key three times.
    for _ in 0..3 {
        for key in &keys {
            fixture.publish(key).await;
        }
    }
    wait_until("round 1 acked", LIMIT, || {
        consumer.stats().snapshot().acked() == 60
    })
    .await;
    assert_eq!(fixture.tiers.rows(None).await, 20);

    // Redis loses everything: every key's next delivery finds no fast-path record.
    fixture.tiers.flush_redis(FLUSHED_DB).await;
    // Round 2: redeliveries of every key, with another flush in the middle of the run.
    for round in 0..3 {
        for key in &keys {
            fixture.publish(key).await;
        }
        if round == 1 {
            fixture.tiers.flush_redis(FLUSHED_DB).await;
        }
    }
    wait_until("round 2 acked", LIMIT, || {
        consumer.stats().snapshot().acked() == 120
    })
    .await;
    task.abort();

    for key in &keys {
        assert_eq!(fixture.tiers.rows(Some(key)).await, 1, "{key} granted once");
    }
    assert_eq!(fixture.tiers.rows(None).await, 20);
    let stats = consumer.stats().snapshot();
    assert_eq!(stats.processed, 20, "{stats:?}");
    // At least one SQL answer per key after the first flush: the cost of the miss.
    assert!(stats.already_done >= 20, "{stats:?}");
    assert_eq!(stats.processed + stats.replayed + stats.already_done, 120);
    fixture.cleanup().await;
}

/// Where the child process stops (and is killed with SIGKILL).
const CHILD_MODE: &str = "IDEM_CHILD_MODE";

/// A payload mismatch is answered the same by both tiers: rejected. Tier 1 knows nothing of the
/// key (as after a flush) while the truth holds it with another payload; the business code does
/// not run, the message is rejected, and tier 1 keeps no record of the rejected payload, so the
/// original payload's duplicate is still acked. Calls `IdempotentConsumer::process` directly:
/// nothing here depends on the broker.
#[tokio::test]
async fn a_payload_mismatch_is_rejected_by_either_tier() {
    let Some(tiers) = Tiers::new(0, "idem-two-tier-mismatch").await else {
        return;
    };
    let original = Message::new("grant 1 coupon").with_header("business-key", "T1");
    let other = Message::new("grant 9 coupons").with_header("business-key", "T1");
    let truth = tiers.truth();
    let first = Job {
        key: IdempotencyKey::parse("T1").unwrap(),
        message: original.clone(),
        fingerprint: Fingerprint::of_bytes(original.payload()),
        lease: None,
    };
    let Handled::Output(produced) = truth.run(&first).await.unwrap() else {
        panic!("the first run produces the coupon id");
    };
    let consumer = IdempotentConsumer::new(
        tiers.fast_path().await,
        Scope::new("coupon-grant"),
        Header::new("business-key"),
        truth,
    );

    let by_truth = consumer.process(other.clone()).await;
    assert_eq!(by_truth, Verdict::Rejected(RejectReason::Mismatch));
    assert_eq!(by_truth.action(), Action::Reject);
    // The truth replays what the first run produced, and tier 1 keeps it from then on.
    assert_eq!(
        consumer.process(original.clone()).await,
        Verdict::AlreadyDone {
            output: produced.clone()
        }
    );
    assert_eq!(
        consumer.process(original).await,
        Verdict::Replayed { output: produced }
    );
    assert_eq!(
        consumer.process(other).await,
        Verdict::Rejected(RejectReason::Mismatch),
        "tier 1 now answers the mismatch itself"
    );
    assert_eq!(tiers.rows(Some("T1")).await, 1);
    tiers.drop_tables().await;
}

/// What the business code produced (the coupon row's id) is the key's outcome on both tiers:
/// the SQL record's at once, committed with the work; the Redis record's once the first copy
/// met the pending claim and the truth answered it (the same bytes), which later copies replay.
/// Calls
/// `IdempotentConsumer::process` directly: nothing here depends on the broker.
#[tokio::test]
async fn the_business_output_is_stored_on_both_tiers() {
    let Some(tiers) = Tiers::new(0, "idem-two-tier-output").await else {
        return;
    };
    let scope = Scope::new("coupon-grant");
    let consumer = IdempotentConsumer::new(
        tiers.fast_path().await,
        scope.clone(),
        Header::new("business-key"),
        tiers.truth(),
    );
    let message = Message::new("grant a coupon").with_header("business-key", "T7");
    let first = consumer.process(message.clone()).await;
    let id: i64 = sqlx::query_scalar(&format!(
        "SELECT id FROM {} WHERE business_key = 'T7'",
        tiers.coupons_table()
    ))
    .fetch_one(tiers.pool())
    .await
    .unwrap();
    let produced = Bytes::from(serde_json::to_vec(&id).unwrap());
    assert_eq!(
        first,
        Verdict::Processed {
            recorded: false,
            output: produced.clone()
        }
    );

    let key = IdempotencyKey::parse("T7").unwrap();
    let fast_key = scope.storage_key_for(Mechanism::Message, key.as_str());
    let store = consumer.engine().unwrap().store();
    let pending = store
        .get(&fast_key)
        .await
        .unwrap()
        .expect("the pending claim");
    assert!(pending.outcome.is_none(), "pending: no second round trip");
    assert_eq!(
        consumer.process(message.clone()).await,
        Verdict::AlreadyDone {
            output: produced.clone()
        }
    );
    let fast = store
        .get(&fast_key)
        .await
        .unwrap()
        .expect("the fast tier's record");
    assert_eq!(fast.outcome.unwrap().body, produced);
    let truth_key = scope.storage_key_for(Mechanism::Message, "T7");
    let sql = consumer.handler().store().get(&truth_key).await;
    let sql = sql.unwrap().expect("the SQL record");
    assert_eq!(sql.outcome.unwrap().body, produced);

    assert_eq!(
        consumer.process(message).await,
        Verdict::Replayed { output: produced }
    );
    assert_eq!(tiers.rows(Some("T7")).await, 1);
    tiers.drop_tables().await;
}

#[derive(serde::Deserialize)]
struct Paid {
    trade_no: String,
    coupons: i64,
}

/// A typed handler (`Json<Paid>`) wrapped in a closure of the user's own (a step after the
/// business code) runs as written; a payload it cannot read is rejected without a claim on
/// either tier, and a corrected redelivery of the same key then runs.
#[tokio::test]
async fn a_typed_handler_wrapped_in_the_users_own_runs_and_unreadable_payloads_are_rejected() {
    let Some(tiers) = Tiers::new(0, "idem-two-tier-typed").await else {
        return;
    };
    let insert = format!(
        "INSERT INTO {} (business_key) SELECT $1 FROM generate_series(1, $2) RETURNING id",
        tiers.coupons_table()
    );
    let grant = move |tx: Tx<sqlx::Postgres>, Json(paid): Json<Paid>| {
        let insert = insert.clone();
        async move {
            let ids: Vec<i64> = sqlx::query_scalar(&insert)
                .bind(paid.trade_no)
                .bind(paid.coupons)
                .fetch_all(&mut *tx.conn().await)
                .await?;
            Ok::<_, sqlx::Error>(ids.len())
        }
    };
    let after = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&after);
    let wrapped = move |tx: Tx<sqlx::Postgres>, paid: Json<Paid>| {
        let (grant, counted) = (grant.clone(), Arc::clone(&counted));
        async move {
            let granted = grant(tx, paid).await?;
            counted.fetch_add(granted, std::sync::atomic::Ordering::SeqCst);
            Ok::<_, sqlx::Error>(granted)
        }
    };
    let scope = Scope::new("coupon-grant");
    let consumer = IdempotentConsumer::new(
        tiers.fast_path().await,
        scope.clone(),
        JsonField::new("/trade_no"),
        SqlTruth::new(tiers.truth_store(), scope.clone(), wrapped),
    );

    let unreadable = Message::new(r#"{"trade_no":"T8","coupons":"two"}"#);
    let verdict = consumer.process(unreadable).await;
    assert!(
        matches!(&verdict, Verdict::Rejected(RejectReason::Payload(reason)) if reason.contains("invalid type")),
        "{verdict:?}"
    );
    assert_eq!(verdict.action(), Action::Reject);
    let key = IdempotencyKey::parse("T8").unwrap();
    assert!(
        consumer
            .engine()
            .unwrap()
            .store()
            .get(&scope.storage_key_for(Mechanism::Message, key.as_str()))
            .await
            .unwrap()
            .is_none()
    );
    let truth_key = scope.storage_key_for(Mechanism::Message, "T8");
    assert!(
        consumer
            .handler()
            .store()
            .get(&truth_key)
            .await
            .unwrap()
            .is_none()
    );

    let corrected = Message::new(r#"{"trade_no":"T8","coupons":2}"#);
    // The wrapped business code's answer (2 coupons) is what every delivery of T8 gets.
    let two = Bytes::from_static(b"2");
    assert_eq!(
        consumer.process(corrected.clone()).await,
        Verdict::Processed {
            recorded: false,
            output: two.clone()
        }
    );
    // The first copy is answered by the truth and settles the pending claim; the next replays.
    assert_eq!(
        consumer.process(corrected.clone()).await,
        Verdict::AlreadyDone {
            output: two.clone()
        }
    );
    assert_eq!(
        consumer.process(corrected).await,
        Verdict::Replayed { output: two }
    );
    assert_eq!(tiers.rows(Some("T8")).await, 2);
    assert_eq!(after.load(std::sync::atomic::Ordering::SeqCst), 2);
    tiers.drop_tables().await;
}

/// The child: consumes the queue; the business transaction hangs before commit (`in_tx`) or
/// the handler hangs after commit, before the fast path is completed and the message acked
/// (`after_commit`). It prints a marker, then waits to be killed.
async fn child(mode: String) {
    let fixture = Fixture::from_env().await;
    // A fast-path lease far longer than the test waits: the redelivery must not wait it out.
    let consumer = IdempotentConsumer::new(
        fixture
            .tiers
            .fast_path_leased(Duration::from_secs(600))
            .await,
        Scope::new("coupon-grant"),
        Header::new("business-key"),
        fixture.tiers.hanging_handler(mode),
    );
    let deliveries = fixture.deliveries(&fixture.amqp).await;
    let _ = rabbitmq::serve(
        &consumer,
        deliveries,
        &rabbitmq::DeadLetters::drop_and_log(),
    )
    .concurrency(1)
    .await;
}

#[tokio::test]
async fn a_consumer_killed_with_sigkill_mid_message_processes_it_once_after_restart() {
    if let Ok(mode) = std::env::var(CHILD_MODE) {
        return child(mode).await;
    }
    for mode in ["in_tx", "after_commit"] {
        let Some(fixture) = Fixture::new(0).await else {
            return;
        };
        fixture.publish("T1").await;

        let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_consumer_killed_with_sigkill_mid_message_processes_it_once_after_restart",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_MODE, mode)
            .env("IDEM_QUEUE", &fixture.queue)
            .envs(fixture.tiers.child_env())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let marker = format!("CHILD-READY {mode}");
        tokio::time::timeout(LIMIT, async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if line.contains(&marker) {
                    return;
                }
            }
            panic!("the child exited before reaching {mode}");
        })
        .await
        .expect("the child reaches its kill point");
        child.kill().await.unwrap(); // SIGKILL: no destructor, no rollback, no release runs.
        let expected_before = if mode == "in_tx" { 0 } else { 1 };
        assert_eq!(
            fixture.tiers.rows(Some("T1")).await,
            expected_before,
            "{mode}: committed rows at the kill"
        );

        // Restart: a new consumer, same Redis prefix, same tables. RabbitMQ redelivers T1; the
        // dead owner's Redis claim holds for 10 minutes, so the fast tier answers "in flight"
        // and the truth (SqlTruth guards itself) decides at once.
        let consumer = Arc::new(
            IdempotentConsumer::new(
                fixture.tiers.fast_path().await,
                Scope::new("coupon-grant"),
                Header::new("business-key"),
                fixture.tiers.truth(),
            )
            .with_backoff(Backoff::new(
                Duration::from_millis(100),
                Duration::from_secs(1),
            )),
        );
        let connection = Connection::connect(&amqp_url(), ConnectionProperties::default())
            .await
            .unwrap();
        let deliveries = fixture.deliveries(&connection).await;
        let running = Arc::clone(&consumer);
        let task = tokio::spawn(async move {
            let _ = rabbitmq::serve(&running, deliveries, &rabbitmq::DeadLetters::drop_and_log())
                .concurrency(4)
                .await;
        });
        wait_until("the redelivery to be settled", LIMIT, || {
            consumer.stats().snapshot().acked() == 1
        })
        .await;
        fixture.publish("T1").await;
        wait_until("a late duplicate to be acked", LIMIT, || {
            consumer.stats().snapshot().acked() == 2
        })
        .await;
        task.abort();

        let stats = consumer.stats().snapshot();
        assert_eq!(
            stats.in_flight, 0,
            "{mode}: the dead consumer's fast-tier claim never requeued the redelivery: {stats:?}"
        );
        if mode == "in_tx" {
            assert_eq!(
                stats.processed, 1,
                "{mode}: the rolled-back work runs once: {stats:?}"
            );
        } else {
            assert_eq!(
                stats.processed, 0,
                "{mode}: committed work is not run again: {stats:?}"
            );
        }
        // The truth answers the redelivery (after commit: done; in the transaction: it runs
        // the rolled-back work) and settles the dead consumer's pending claim with its output:
        // the late duplicate replays from the fast tier.
        let answered_by_truth = if mode == "in_tx" { 0 } else { 1 };
        assert_eq!(
            (stats.already_done, stats.replayed),
            (answered_by_truth, 1),
            "{mode}: SQL said done: {stats:?}"
        );
        assert_eq!(
            fixture.tiers.rows(Some("T1")).await,
            1,
            "{mode}: one coupon"
        );
        let _ = connection.close(200, "done".into()).await;
        fixture.cleanup().await;
    }
}

/// A conflicting copy (the same trade, another amount) delivered by RabbitMQ is acked as a
/// conflict, never run, and marks the record on both tiers: the fast tier's, and the truth's,
/// which reconciliation lists. When the fast tier no longer holds the key, the truth finds the
/// conflict and marks its own record.
#[tokio::test]
async fn a_conflicting_copy_marks_the_record_on_both_tiers() {
    use idempotency_operations::{Admin, Operations, Query, TracingAudit};

    let Some(fixture) = Fixture::new(0).await else {
        return;
    };
    let scope = Scope::new("coupon-grant");
    let consumer = Arc::new(
        TwoTier::new(fixture.tiers.truth())
            .consumer(fixture.tiers.fast_path().await, JsonField::new("/trade_no"))
            .unwrap()
            .fingerprint_json_fields(["/trade_no", "/trade_status", "/total_amount"]),
    );
    let connection = Connection::connect(&amqp_url(), ConnectionProperties::default())
        .await
        .unwrap();
    let deliveries = fixture.deliveries(&connection).await;
    let running = Arc::clone(&consumer);
    let task = tokio::spawn(async move {
        let _ = rabbitmq::serve(&running, deliveries, &rabbitmq::DeadLetters::drop_and_log())
            .concurrency(1)
            .await;
    });
    let send = |body: &'static str| {
        let channel = fixture.channel.clone();
        let queue = fixture.queue.clone();
        async move {
            channel
                .basic_publish(
                    "".into(),
                    queue.as_str().into(),
                    BasicPublishOptions::default(),
                    body.as_bytes(),
                    BasicProperties::default(),
                )
                .await
                .unwrap()
                .await
                .unwrap();
        }
    };
    const PAID: &str =
        r#"{"trade_no":"T1","trade_status":"TRADE_SUCCESS","total_amount":"8.80","sign":"a"}"#;
    const CONFLICTING: &str =
        r#"{"trade_no":"T1","trade_status":"TRADE_SUCCESS","total_amount":"9.99","sign":"b"}"#;

    send(PAID).await;
    send(CONFLICTING).await;
    wait_until("the paid notice and its conflict acked", LIMIT, || {
        consumer.stats().snapshot().acked() == 2
    })
    .await;
    // One message, one storage key in both tiers.
    let storage_key = scope.storage_key_for(Mechanism::Message, "T1");
    let fast_store = consumer.engine().unwrap().store();
    let fast = fast_store.get(&storage_key).await.unwrap();
    let fast = fast.expect("the fast tier's record");
    assert_eq!(fast.conflicts, 1, "the fast tier's record is marked");
    let truth_key = storage_key;
    let truth_store = consumer.handler().store();
    let truth = truth_store.get(&truth_key).await.unwrap().unwrap();
    assert_eq!(truth.conflicts, 1, "the truth's record is marked");
    assert!(truth.last_conflict_at.is_some());

    // The fast tier forgets the key (an expiry, a flush): the truth meets the next conflict.
    assert!(
        fast_store
            .delete_fenced(&storage_key, fast.token)
            .await
            .unwrap()
    );
    send(CONFLICTING).await;
    wait_until("the second conflict acked", LIMIT, || {
        consumer.stats().snapshot().acked() == 3
    })
    .await;
    task.abort();
    let stats = consumer.stats().snapshot();
    assert_eq!((stats.processed, stats.conflicts), (1, 2), "{stats:?}");
    assert_eq!(fixture.tiers.rows(Some("T1")).await, 1);
    let admin = Admin::new(fixture.tiers.truth_store(), TracingAudit);
    let listed = admin
        .list(&Query::all().min_conflicts(1), 100, &mut |_| {})
        .await
        .unwrap();
    assert_eq!(listed.len(), 1, "reconciliation lists the truth's record");
    assert_eq!(listed[0].key, truth_key);
    assert_eq!(listed[0].conflicts, 2);
    fixture.cleanup().await;
}
