#![allow(unused)]
use idempotency_core::{Idempotency, Error, MemoryStore};
use idempotency_function::idempotent;

#[idempotent(store = engine)]
async fn no_key(engine: &Idempotency<MemoryStore>, id: u64) -> Result<u64, Error> {
    Ok(id)
}

fn main() {}
