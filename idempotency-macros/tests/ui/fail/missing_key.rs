#![allow(unused)]
use idempotency_core::{Idempotency, IdempotentError, MemoryStore, idempotent};

#[idempotent(store = engine)]
async fn no_key(engine: &Idempotency<MemoryStore>, id: u64) -> Result<u64, IdempotentError> {
    Ok(id)
}

fn main() {}
