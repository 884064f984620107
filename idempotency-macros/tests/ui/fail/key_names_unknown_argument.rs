#![allow(unused)]
use idempotency_core::{Idempotency, Error, MemoryStore};
use idempotency_function::idempotent;

#[idempotent(key = event.trade_no, store = engine)]
async fn typo(engine: &Idempotency<MemoryStore>, evt: String) -> Result<u64, Error> {
    Ok(1)
}

#[idempotent(key = self.id, store = engine)]
async fn no_receiver(engine: &Idempotency<MemoryStore>, id: u64) -> Result<u64, Error> {
    Ok(id)
}

fn main() {}
