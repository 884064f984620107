#![allow(unused)]
use idempotency_core::{Idempotency, Error, MemoryStore};
use idempotency_function::idempotent;

#[idempotent(key = id, store = engine, ttl = "1h", ttl = "2h")]
async fn twice(engine: &Idempotency<MemoryStore>, id: u64) -> Result<u64, Error> {
    Ok(id)
}

#[idempotent(key = id, store = engine, engine = engine)]
async fn store_and_engine(engine: &Idempotency<MemoryStore>, id: u64) -> Result<u64, Error> {
    Ok(id)
}

fn main() {}
