#![allow(unused)]
use idempotency_core::{Idempotency, IdempotentError, MemoryStore, idempotent};

#[idempotent(key = id, store = engine)]
fn not_async(engine: &Idempotency<MemoryStore>, id: u64) -> Result<u64, IdempotentError> {
    Ok(id)
}

fn main() {}
