#![allow(unused)]
use idempotency_core::{Idempotency, Error, MemoryStore};
use idempotency_function::idempotent;

#[idempotent(key = id, store = engine)]
async fn returns_a_plain_value(engine: &Idempotency<MemoryStore>, id: u64) -> u64 {
    id
}

#[idempotent(key = id, store = engine)]
async fn returns_nothing(engine: &Idempotency<MemoryStore>, id: u64) {}

fn main() {}
