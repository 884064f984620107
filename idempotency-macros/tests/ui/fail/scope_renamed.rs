#![allow(unused)]
use idempotency_core::{Idempotency, Error, MemoryStore};
use idempotency_function::idempotent;

#[idempotent(key = id, store = engine, scope = "orders")]
async fn renamed(engine: &Idempotency<MemoryStore>, id: u64) -> Result<u64, Error> {
    Ok(id)
}

fn main() {}
