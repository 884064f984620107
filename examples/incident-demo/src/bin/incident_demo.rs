//! The incident of the post-mortem, replayed: `cargo run -p incident-demo`.
//!
//! A payment gateway retried one callback six times and the user received six coupons. The
//! demo starts the payments service in-process on a loopback port, first with the incident's
//! original callback handler and no idempotency layer, then as this toolkit serves it, and plays
//! the gateway: the same callback six times one after the other, then six times at once (a new
//! order each time). It prints the coupons granted in each case.

use std::process::ExitCode;

use axum_payments::client::{ClientError, Reply};
use axum_payments::{
    AppState, HttpService, PaymentCallback, Server, UserId, app, bare, gateway, incident,
};
use idempotency_core::{BoxStore, MemoryStore};

/// How often the gateway sends the same callback (the post-mortem's count).
const TIMES: usize = 6;

/// Coupons granted in the sequential and the concurrent case.
struct Granted {
    sequential: u64,
    concurrent: u64,
}

async fn play(service: impl HttpService, first_user: UserId) -> Result<Granted, ClientError> {
    let server = Server::spawn(service).await?;
    let addr = server.addr();
    let mut granted = [0u64; 2];
    for (index, concurrent) in [false, true].into_iter().enumerate() {
        let user_id = first_user + index as u64;
        let order = gateway::create_order(addr, user_id, 1299, &format!("order-{user_id}")).await?;
        let callback = PaymentCallback {
            trade_no: format!("T{user_id}"),
            order_id: order.order_id,
        };
        let replies = if concurrent {
            gateway::deliver_concurrently(addr, &callback, TIMES).await?
        } else {
            gateway::deliver_sequentially(addr, &callback, TIMES).await?
        };
        let retried = retry_in_flight(addr, &callback, &replies).await?;
        let coupons = gateway::coupons(addr, user_id).await?;
        let paid = gateway::order(addr, order.order_id).await?;
        println!(
            "    {TIMES} {:<10} callbacks (order {}, trade_no {}): answers {}{} → order {}, coupons granted to user {user_id}: {coupons}",
            if concurrent {
                "concurrent"
            } else {
                "sequential"
            },
            order.order_id,
            callback.trade_no,
            gateway::tally(&replies),
            retried,
            paid.status.as_str(),
        );
        granted[index] = coupons;
    }
    server.shutdown().await?;
    Ok(Granted {
        sequential: granted[0],
        concurrent: granted[1],
    })
}

/// A gateway retries a callback that was refused as in flight (409): retry those once, after
/// `Retry-After`, and tell what they got.
async fn retry_in_flight(
    addr: std::net::SocketAddr,
    callback: &PaymentCallback,
    replies: &[Reply],
) -> Result<String, ClientError> {
    let refused = replies
        .iter()
        .filter(|reply| reply.status == http::StatusCode::CONFLICT)
        .count();
    if refused == 0 {
        return Ok(String::new());
    }
    let wait = replies
        .iter()
        .filter_map(|reply| reply.headers.get(http::header::RETRY_AFTER))
        .filter_map(|value| value.to_str().ok()?.parse::<u64>().ok())
        .max()
        .unwrap_or(1);
    tokio::time::sleep(std::time::Duration::from_secs(wait)).await;
    let retries = gateway::deliver_sequentially(addr, callback, refused).await?;
    Ok(format!(
        " (409 = first still in flight; the gateway retried them after {wait} s: {})",
        gateway::tally(&retries)
    ))
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("incident_demo: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<bool, ClientError> {
    println!(
        "The incident: a payment gateway retried one callback {TIMES} times and the user got {TIMES} coupons."
    );
    println!(
        "Each case below starts the payments service on 127.0.0.1 (ephemeral port, memory store),"
    );
    println!("creates a new order, and sends the same payment callback {TIMES} times.\n");

    println!("[1] WITHOUT the idempotency layer: the original callback handler of the incident.");
    println!(
        "    It grants the coupon in the entry point on every call (no dedup) and then writes"
    );
    println!("    status = PAID unconditionally; nothing notices the duplicates.");
    let before = play(incident(AppState::in_memory()), 7).await?;

    println!(
        "\n[2] WITH the idempotency layer: key = the body's /trade_no (the gateway sends no header),"
    );
    println!(
        "    in front of the fixed handler, whose WAIT_PAY → PAID transition grants the coupon."
    );
    println!("    Duplicates never reach the handler: they get the first answer replayed");
    println!(
        "    (Idempotent-Replayed: true), or 409 + Retry-After while the first is still running."
    );
    let after = play(
        app(AppState::in_memory(), BoxStore::new(MemoryStore::new())),
        7,
    )
    .await?;

    println!(
        "\n[3] For the record, the fixed handler WITHOUT the layer: its state machine alone also grants once"
    );
    println!(
        "    (update … where status = 'WAIT_PAY'), but every duplicate runs the handler again and"
    );
    println!(
        "    is answered fresh; the layer is what stores and replays the answer, and what guards"
    );
    println!(
        "    endpoints that have no state machine (order creation, coupon grants, queue consumers)."
    );
    let machine = play(bare(AppState::in_memory()), 7).await?;

    println!(
        "\nCoupons granted  sequential  concurrent\n  [1] incident     {:>9}  {:>10}\n  [2] with layer   {:>9}  {:>10}\n  [3] state machine{:>9}  {:>10}",
        before.sequential,
        before.concurrent,
        after.sequential,
        after.concurrent,
        machine.sequential,
        machine.concurrent
    );
    let fixed = after.sequential == 1 && after.concurrent == 1;
    if fixed {
        println!(
            "\nWith the layer: exactly one coupon per payment, however often the gateway retries."
        );
    } else {
        println!(
            "\nUNEXPECTED: the protected service did not grant exactly one coupon per payment."
        );
    }
    Ok(fixed)
}
