#![allow(unused)]
use idempotency_core::Error;
use idempotency_function::idempotent;

struct Settings {
    retries: u32,
}

#[idempotent(key = id, store = settings)]
async fn wrong_store(settings: &Settings, id: u64) -> Result<u64, Error> {
    Ok(id)
}

fn main() {}
