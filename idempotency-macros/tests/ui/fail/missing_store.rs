#![allow(unused)]
use idempotency_core::{Idempotency, Error, MemoryStore};
use idempotency_function::idempotent;

#[idempotent(key = id)]
async fn no_store(id: u64) -> Result<u64, Error> {
    Ok(id)
}

fn main() {}
