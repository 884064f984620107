//! The fourth way of `cross_db_callback`, the one that works across databases: a transactional
//! outbox on the sending side, an idempotent consumer on the receiving side.
//!
//! The callback service owns the orders database; the coupon service owns another. The callback
//! marks the order paid (a state transition) and, only when that transition applied, enqueues a
//! coupon grant in the **same transaction** (`idempotency_outbox::Outbox`); a relay
//! (`idempotency_outbox::Relay`) publishes committed grants to RabbitMQ with a message id derived
//! from the trade; the coupon service claims that id in **its own** transaction together with
//! the coupon (`idempotency_queue::two_tier::SqlTruth`).
//!
//! Each row of the table is one trade: the gateway's six callbacks, then one crash at one
//! boundary, each a real process killed with SIGKILL (or every broker connection reset), then the
//! surviving services run until everything settled. The program prints the table and exits
//! non-zero if any trade ended with other than exactly one coupon.
//!
//! ```text
//! cargo run -p incident-demo --features outbox --bin outbox_demo
//! ```
//!
//! Needs PostgreSQL (`DATABASE_URL`, default `postgres://postgres@127.0.0.1:5432/postgres`; the
//! databases `outbox_demo_orders` and `outbox_demo_coupons` are created if missing) and RabbitMQ
//! (`AMQP_URL`, default `amqp://guest:guest@127.0.0.1:5672/%2f`). Each run uses tables and a
//! queue of its own and drops them at the end.
#![allow(clippy::print_stdout)]

mod scenarios;
mod services;
mod setup;

use scenarios::{Crash, Ctx};
use setup::Run;

/// Errors of this demo.
#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Store(#[from] idempotency_core::StoreError),
    #[error(transparent)]
    Sql(#[from] sqlx::Error),
    #[error(transparent)]
    Amqp(#[from] lapin::Error),
    #[error(transparent)]
    Key(#[from] idempotency_core::KeyError),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Tiers(#[from] idempotency_queue::two_tier::TierConfigError),
    #[error("{0}")]
    Usage(String),
    #[error("stuck: {0}")]
    Stuck(String),
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        [] => orchestrate().await,
        // The child processes, each killed at its crash point.
        ["callback", trade] => child_callback(trade).await,
        ["relay", "--die-after-publish"] => child_relay().await,
        ["coupons", "--die-after-commit"] => child_coupons().await,
        other => Err(Error::Usage(format!(
            "unknown arguments {other:?}; run without arguments"
        ))),
    };
    match result {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(error) => {
            eprintln!("outbox_demo: {error}");
            std::process::ExitCode::from(2)
        }
    }
}

/// Runs every row, prints the table; whether every trade got exactly one coupon.
async fn orchestrate() -> Result<bool, Error> {
    let run = Run::fresh()?;
    let trades: Vec<String> = (1..=Crash::ALL.len()).map(|n| format!("T{n}")).collect();
    let trade_refs: Vec<&str> = trades.iter().map(String::as_str).collect();
    let (orders, coupons) = setup::create(&run, &trade_refs).await?;
    let ctx = Ctx::new(run, orders, coupons).await?;
    println!(
        "callback service (database outbox_demo_orders) -> outbox -> relay -> RabbitMQ -> \
         coupon service (database outbox_demo_coupons), run {}",
        ctx.run.id
    );
    println!("each trade: the gateway's 6 callbacks, one crash, the survivors until settled");
    println!(
        "(enqueued: callbacks whose transaction enqueued the grant; dropped: copies the coupon \
         service received again and dropped)\n"
    );
    println!(
        "  {:<56} {:<5} {:>8} {:>7} {:>7}",
        "crash", "trade", "enqueued", "dropped", "coupons"
    );
    for (crash, trade) in Crash::ALL.into_iter().zip(&trade_refs) {
        let outcome = scenarios::row(&ctx, crash, trade).await?;
        println!(
            "  {:<56} {:<5} {:>8} {:>7} {:>7}  {}",
            crash.label(),
            trade,
            format!("{}/6", outcome.enqueued),
            outcome.dropped,
            outcome.coupons,
            if outcome.coupons == 1 { "ok" } else { "WRONG" }
        );
    }
    // Counted again at the end: a late duplicate would show here.
    let mut all_one = true;
    for trade in &trade_refs {
        all_one &= ctx.coupons.coupons_of(trade).await? == 1;
    }
    let dead = idempotency_outbox::OutboxTable::counts(&ctx.orders.outbox)
        .await?
        .dead;
    setup::drop_all(&ctx.run, &ctx.orders, &ctx.coupons).await?;
    if all_one && dead == 0 {
        println!("\nexactly one coupon per trade, none lost, across two databases");
    } else {
        println!("\nFAILED: some trade did not end with exactly one coupon ({dead} dead messages)");
    }
    Ok(all_one && dead == 0)
}

/// The callback service, dying before its commit.
async fn child_callback(trade: &str) -> Result<bool, Error> {
    let run = Run::from_env()?;
    let orders = setup::OrdersDb::open(&run).await?;
    services::callback(&orders, &run, trade, true).await?;
    Err(Error::Stuck(
        "the callback outlived its crash point".to_owned(),
    ))
}

/// The relay, dying after the broker confirmed a batch.
async fn child_relay() -> Result<bool, Error> {
    let run = Run::from_env()?;
    let orders = setup::OrdersDb::open(&run).await?;
    services::relay(&orders, setup::amqp_url(), true)
        .run()
        .await;
    Err(Error::Stuck(
        "the relay outlived its crash point".to_owned(),
    ))
}

/// The coupon service, dying after its commit, before its ack.
async fn child_coupons() -> Result<bool, Error> {
    let run = Run::from_env()?;
    let coupons = setup::CouponsDb::open(&run).await?;
    let consumer = std::sync::Arc::new(services::coupon_consumer(&coupons, true)?);
    let session = services::consume(consumer, &run, &setup::amqp_url()).await?;
    let _ = session.task.await;
    Err(Error::Stuck(
        "the coupon service outlived its crash point".to_owned(),
    ))
}
