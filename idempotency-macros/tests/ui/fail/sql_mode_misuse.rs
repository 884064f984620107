#![allow(unused)]
use idempotency_sql::SqliteStore;
use idempotency_core::Error;
use idempotency_function::idempotent;
use sqlx::{Sqlite, Transaction};

#[idempotent(tx = tx, key = id, store = store, ttl = "1h")]
async fn tx_with_ttl(store: &SqliteStore, tx: &mut Transaction<'_, Sqlite>, id: i64) -> Result<i64, Error> {
    Ok(id)
}

#[idempotent(transition(table = "orders", id = order_id, from = "NEW", to = "PAID"))]
async fn transition_without_executor(tx: &mut Transaction<'_, Sqlite>, order_id: i64) -> Result<(), Error> {
    Ok(())
}

#[idempotent(transition(table = "orders; drop table orders", id = order_id, from = "NEW", to = "PAID"), executor = tx)]
async fn bad_table(tx: &mut Transaction<'_, Sqlite>, order_id: i64) -> Result<(), Error> {
    Ok(())
}

#[idempotent(transition(table = "orders", id = order_id, to = "PAID"), executor = tx)]
async fn missing_from(tx: &mut Transaction<'_, Sqlite>, order_id: i64) -> Result<(), Error> {
    Ok(())
}

#[idempotent(transition(table = "orders", id = order_id, from = "NEW", to = "PAID"), executor = tx, key = order_id)]
async fn dedup_key_on_a_transition(tx: &mut Transaction<'_, Sqlite>, order_id: i64) -> Result<(), Error> {
    Ok(())
}

#[idempotent(transition(table = "orders", id = order_id, from = "NEW", to = "PAID"), executor = pool)]
async fn pool_executor(pool: &sqlx::SqlitePool, order_id: i64) -> Result<(), Error> {
    Ok(())
}

#[idempotent(transition(table = "orders", id = order_id, from = ["NEW", 10], to = "PAID"), executor = tx)]
async fn mixed_states(tx: &mut Transaction<'_, Sqlite>, order_id: i64) -> Result<(), Error> {
    Ok(())
}

#[idempotent(transition(table = "orders", id = order_id, from = "NEW", to = 2.5), executor = tx)]
async fn float_state(tx: &mut Transaction<'_, Sqlite>, order_id: i64) -> Result<(), Error> {
    Ok(())
}

fn main() {}
