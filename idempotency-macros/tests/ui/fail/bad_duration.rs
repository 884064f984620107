#![allow(unused)]
use idempotency_core::{Idempotency, Error, MemoryStore};
use idempotency_function::idempotent;

#[idempotent(key = id, store = engine, ttl = "24 hours")]
async fn bad_ttl(engine: &Idempotency<MemoryStore>, id: u64) -> Result<u64, Error> {
    Ok(id)
}

#[idempotent(key = id, store = engine, lease = "0s")]
async fn zero_lease(engine: &Idempotency<MemoryStore>, id: u64) -> Result<u64, Error> {
    Ok(id)
}

fn main() {}
