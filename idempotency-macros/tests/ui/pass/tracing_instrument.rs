//! `#[tracing::instrument]` stacked on either side, with `err` and `skip`.
use idempotency_core::{Idempotency, Error, MemoryStore};
use idempotency_function::idempotent;

#[tracing::instrument(skip(engine), err)]
#[idempotent(key = order_id, store = engine, namespace = "orders.pay")]
async fn instrument_outside(engine: &Idempotency<MemoryStore>, order_id: u64) -> Result<u64, Error> {
    tracing::info!("paying");
    Ok(order_id)
}

#[idempotent(key = order_id, store = engine, namespace = "orders.ship")]
#[tracing::instrument(skip(engine), ret)]
async fn instrument_inside(engine: &Idempotency<MemoryStore>, order_id: u64) -> Result<u64, Error> {
    Ok(order_id)
}

fn main() {
    fn assert_send<F: std::future::Future + Send>(_: F) {}
    let engine = Idempotency::new(MemoryStore::new());
    assert_send(instrument_outside(&engine, 1));
    assert_send(instrument_inside(&engine, 1));
}
