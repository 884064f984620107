#![allow(unused)]
use idempotency_core::{Idempotency, Error, MemoryStore};
use idempotency_function::idempotent;

struct NotStorable;

#[idempotent(key = id, store = engine)]
async fn value_not_serializable(engine: &Idempotency<MemoryStore>, id: u64) -> Result<NotStorable, Error> {
    Ok(NotStorable)
}

#[derive(Debug)]
struct PlainError;

#[idempotent(key = id, store = engine)]
async fn error_without_from(engine: &Idempotency<MemoryStore>, id: u64) -> Result<u64, PlainError> {
    Ok(id)
}

fn main() {}
