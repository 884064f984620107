//! The three parts of the system: the callback service (orders database, outbox), the relay, and
//! the coupon service (its own database, an idempotent consumer). Each can be told to die at its
//! crash point, where it prints [`CRASH_POINT`] and waits for the orchestrator's SIGKILL.

use std::sync::Arc;
use std::time::Duration;

use idempotency_core::{Idempotency, IdempotencyKey, MemoryStore, Scope};
use idempotency_outbox::OutboxMessage;
use idempotency_outbox::Relay;
use idempotency_outbox::rabbitmq::RabbitMqTarget;
use idempotency_queue::two_tier::{Json, SqlTruth, TwoTier, Tx};
use idempotency_queue::{Backoff, Handler, IdempotentConsumer, MessageId, rabbitmq};
use idempotency_sql::Transition;
use lapin::options::{BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};
use serde::{Deserialize, Serialize};
use sqlx::Postgres;

use crate::Error;
use crate::setup::{CouponsDb, OrdersDb, Run};

/// What a process prints when it reached its crash point; it then waits to be killed.
pub(crate) const CRASH_POINT: &str = "CRASH POINT REACHED";

/// The namespace of coupon grants: scopes the message ids and the coupon service's records.
const GRANTS: &str = "coupon.grant";

/// The coupon grant the callback service sends.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Paid {
    pub(crate) trade_no: String,
    pub(crate) user_id: i64,
}

/// Announces the crash point and blocks the whole process until it is killed.
fn die_here() -> ! {
    println!("{CRASH_POINT}");
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// One delivery of the payment gateway's callback for `trade`: marks the order paid and, only if
/// this call made the transition, enqueues the coupon grant, in one transaction. Whether it
/// enqueued. With `die_before_commit` the process dies just before the commit.
pub(crate) async fn callback(
    db: &OrdersDb,
    run: &Run,
    trade: &str,
    die_before_commit: bool,
) -> Result<bool, Error> {
    let key = IdempotencyKey::parse(trade)?;
    let paid = Transition::new(&db.orders, "trade_no", "state")?
        .from("pending")
        .to("paid");
    let mut tx = db.pool.begin().await?;
    let outcome = paid.apply_postgres(&mut *tx, trade).await?;
    let mut enqueued = false;
    if outcome.is_applied() {
        let user_id: i64 = sqlx::query_scalar(&format!(
            "SELECT user_id FROM {} WHERE trade_no = $1",
            db.orders
        ))
        .bind(trade)
        .fetch_one(&mut *tx)
        .await?;
        let grant = Paid {
            trade_no: trade.to_owned(),
            user_id,
        };
        let message = OutboxMessage::new(
            &Scope::new(GRANTS),
            &key,
            run.queue(),
            serde_json::to_vec(&grant)?,
        );
        enqueued = db.outbox.enqueue(&mut tx, &message).await?;
    }
    if die_before_commit {
        die_here();
    }
    tx.commit().await?;
    Ok(enqueued)
}

/// The relay from the orders database's outbox to RabbitMQ: a lease of 2 s (a dead relay's
/// batch is taken over 2 s later) and quick retries, for the demo's pace. With
/// `die_after_publish` the process dies once the broker confirmed a batch, before marking it.
pub(crate) fn relay(
    db: &OrdersDb,
    amqp_url: String,
    die_after_publish: bool,
) -> Relay<idempotency_outbox::Outbox<Postgres>, RabbitMqTarget> {
    let relay = Relay::new(db.outbox.clone(), RabbitMqTarget::new(amqp_url, ""))
        .with_lease(Duration::from_secs(2))
        .with_backoff(Backoff::new(
            Duration::from_millis(100),
            Duration::from_secs(1),
        ));
    if die_after_publish {
        relay.with_after_deliver(|_| die_here())
    } else {
        relay
    }
}

/// The coupon service's consumer: tier 1 in memory (lost with the process), the SQL truth in
/// the coupon database, keyed by the message id the outbox derived. The grant's dedup record
/// and the coupon commit together; with `die_after_commit` the process dies right after that
/// commit, before the ack.
pub(crate) fn coupon_consumer(
    db: &CouponsDb,
    die_after_commit: bool,
) -> Result<IdempotentConsumer<MemoryStore, MessageId, impl Handler>, Error> {
    let insert = format!(
        "INSERT INTO {} (trade_no, user_id) VALUES ($1, $2) RETURNING id",
        db.coupons
    );
    let truth = SqlTruth::new(
        db.truth.clone(),
        Scope::new(GRANTS),
        move |tx: Tx<Postgres>, Json(paid): Json<Paid>| {
            let insert = insert.clone();
            async move {
                let coupon = sqlx::query_scalar::<_, i64>(&insert)
                    .bind(paid.trade_no)
                    .bind(paid.user_id)
                    .fetch_one(&mut *tx.conn().await)
                    .await?;
                if die_after_commit {
                    tx.after_commit(async { die_here() });
                }
                Ok::<_, sqlx::Error>(coupon)
            }
        },
    );
    let consumer = TwoTier::new(truth)
        .consumer(Idempotency::new(MemoryStore::new()), MessageId)?
        .with_backoff(Backoff::new(
            Duration::from_millis(100),
            Duration::from_secs(1),
        ));
    Ok(consumer)
}

/// A consumer session on its own connection: consumes until the connection closes.
pub(crate) struct Session {
    pub(crate) connection: Connection,
    pub(crate) task: tokio::task::JoinHandle<Result<(), lapin::Error>>,
}

/// Starts consuming `run`'s queue with `consumer` on a new connection to `amqp_url`.
pub(crate) async fn consume<H: Handler>(
    consumer: Arc<IdempotentConsumer<MemoryStore, MessageId, H>>,
    run: &Run,
    amqp_url: &str,
) -> Result<Session, Error> {
    let connection = Connection::connect(amqp_url, ConnectionProperties::default()).await?;
    let channel = connection.create_channel().await?;
    channel.basic_qos(8, BasicQosOptions::default()).await?;
    let deliveries = channel
        .basic_consume(
            run.queue().as_str().into(),
            "coupon-service".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    let dead_letters = rabbitmq::DeadLetters::declare(&connection, &run.queue()).await?;
    let task = tokio::spawn(async move {
        rabbitmq::serve(&consumer, deliveries, &dead_letters)
            .concurrency(4)
            .await
    });
    Ok(Session { connection, task })
}

/// Consumes `run`'s queue with `consumer` until `shutdown` completes, then stops gracefully: the
/// deliveries in hand finish and are acked, the prefetched ones go back to the queue.
pub(crate) async fn consume_until<H: Handler>(
    consumer: Arc<IdempotentConsumer<MemoryStore, MessageId, H>>,
    run: &Run,
    amqp_url: &str,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), lapin::Error> {
    let queue = run.queue();
    let open = || async {
        let connection = Connection::connect(amqp_url, ConnectionProperties::default()).await?;
        let channel = connection.create_channel().await?;
        channel.basic_qos(8, BasicQosOptions::default()).await?;
        let deliveries = channel
            .basic_consume(
                queue.as_str().into(),
                "coupon-service".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        let dead_letters = rabbitmq::DeadLetters::declare(&connection, &queue).await?;
        Ok(rabbitmq::Session {
            connection,
            deliveries,
            dead_letters,
        })
    };
    rabbitmq::serve_reconnecting(&consumer, open)
        .concurrency(4)
        .with_graceful_shutdown(shutdown)
        .await
}
