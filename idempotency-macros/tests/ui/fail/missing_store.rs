#![allow(unused)]
use idempotency_core::{Idempotency, IdempotentError, MemoryStore, idempotent};

#[idempotent(key = id)]
async fn no_store(id: u64) -> Result<u64, IdempotentError> {
    Ok(id)
}

fn main() {}
