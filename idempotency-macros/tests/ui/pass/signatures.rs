//! Every function form keeps its signature: free fns, methods with each receiver, generics,
//! where clauses, visibility, attributes, patterns, `mut` arguments, `?`, early `return`,
//! `Result` aliases, and every argument of the dedup mode.
use std::sync::Arc;

use idempotency_core::{Idempotency, Error, MemoryStore, Store};
use idempotency_function::idempotent;
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
pub struct AppError(String);

impl From<Error> for AppError {
    fn from(error: Error) -> Self {
        Self(error.to_string())
    }
}

impl From<std::num::ParseIntError> for AppError {
    fn from(error: std::num::ParseIntError) -> Self {
        Self(error.to_string())
    }
}

type AppResult<T> = Result<T, AppError>;

#[derive(Serialize)]
pub struct Event {
    id: String,
    amount: u64,
}

pub struct Service<S> {
    engine: Idempotency<S>,
    total: u64,
}

impl<S: Store> Service<S> {
    /// Docs and attributes stay.
    #[idempotent(key = event.id, store = self.engine, namespace = "svc.handle", fingerprint = [event.amount, event])]
    #[allow(clippy::needless_return)]
    pub async fn handle(&self, event: Event) -> Result<u64, AppError> {
        if event.amount == 0 {
            return Ok(0);
        }
        let parsed: u64 = "7".parse()?;
        Ok(event.amount + parsed)
    }

    #[idempotent(key = id, store = self.engine, namespace = "svc.add", ttl = "1h30m", lease = "500ms")]
    pub(crate) async fn add(&mut self, id: u32, mut amount: u64) -> AppResult<u64> {
        amount += 1;
        self.total += amount;
        Ok(self.total)
    }

    #[idempotent(key = id, store = self.engine, namespace = "svc.consume", on_error = "keep", wait = "2s")]
    async fn consume(self, id: u32) -> Result<u64, AppError> {
        Ok(self.total + u64::from(id))
    }
}

#[idempotent(key = format!("{}-{}", pair.0, pair.1), store = engine, principal = tenant)]
async fn tuple_pattern<T>(
    engine: Arc<Idempotency<MemoryStore>>,
    tenant: &str,
    pair: (u8, u8),
    (a, b): (u64, u64),
    _extra: T,
) -> Result<u64, AppError>
where
    T: Send + 'static,
{
    Ok(a + b + u64::from(pair.0))
}

/// Native `async fn` in traits: the attribute goes on the impl's method.
pub trait Handler {
    async fn handle(&self, id: u64) -> Result<u64, AppError>;
}

pub struct Consumer {
    engine: Idempotency<MemoryStore>,
}

impl Handler for Consumer {
    #[idempotent(key = id, store = self.engine, namespace = "consumer.handle")]
    async fn handle(&self, id: u64) -> Result<u64, AppError> {
        Ok(id)
    }
}

fn status(error: Error) -> std::io::Error {
    std::io::Error::other(error)
}

#[idempotent(key = id, store = store, map_err = status)]
async fn shared_store(store: Arc<MemoryStore>, id: u64) -> std::io::Result<u64> {
    Ok(id)
}

fn main() {
    fn assert_send<F: std::future::Future + Send>(_: F) {}
    let engine = Idempotency::new(MemoryStore::new());
    let service = Service { engine, total: 0 };
    assert_send(service.handle(Event { id: "a".into(), amount: 1 }));
    assert_send(tuple_pattern(Arc::new(Idempotency::new(MemoryStore::new())), "t", (1, 2), (3, 4), ()));
    assert_send(shared_store(Arc::new(MemoryStore::new()), 1));
    let mut service = service;
    let _ = service.add(1, 2);
    let _ = service.consume(3);
    let consumer = Consumer { engine: Idempotency::new(MemoryStore::new()) };
    let _ = consumer.handle(1);
}
