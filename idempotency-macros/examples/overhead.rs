//! What `#[idempotent]` costs per call on the memory store: a first call (claim, run, store
//! JSON) and a replay (claim answers with the stored value, decode), against the bare body.
//!
//! Run: `cargo run --release -p idempotency-macros --example overhead [calls]`
#![allow(clippy::unwrap_used)]

use std::time::Instant;

use idempotency_core::{Error, Idempotency, MemoryStore};
use idempotency_function::idempotent;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Receipt {
    order: u64,
    coupon: String,
}

async fn bare(order: u64) -> Result<Receipt, Error> {
    Ok(Receipt {
        order,
        coupon: format!("C-{order}"),
    })
}

#[idempotent(key = order, store = engine, namespace = "overhead", fingerprint = [order])]
async fn guarded(engine: &Idempotency<MemoryStore>, order: u64) -> Result<Receipt, Error> {
    bare(order).await
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let calls: u64 = std::env::args()
        .nth(1)
        .map_or(100_000, |n| n.parse().unwrap());
    let engine = Idempotency::new(MemoryStore::new());
    let per_call = |start: Instant| start.elapsed().as_nanos() as f64 / calls as f64;

    let start = Instant::now();
    for order in 0..calls {
        bare(order).await.unwrap();
    }
    let bare_ns = per_call(start);

    let start = Instant::now();
    for order in 0..calls {
        guarded(&engine, order).await.unwrap();
    }
    let first_ns = per_call(start);

    let start = Instant::now();
    for order in 0..calls {
        assert_eq!(guarded(&engine, order).await.unwrap().order, order);
    }
    let replay_ns = per_call(start);

    println!(
        "{calls} calls: bare body {bare_ns:.0} ns, first call {first_ns:.0} ns, replay {replay_ns:.0} ns"
    );
}
