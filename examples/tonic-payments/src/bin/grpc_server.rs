//! The gRPC Payments server behind the idempotency layer (gRPC mode, memory store).
//!
//! ```text
//! cargo run -p tonic-payments --bin grpc_server
//! GRPC_ADDR=127.0.0.1:50051 FIRST_CALL_DELAY_MS=1500 cargo run ... --bin grpc_server
//! ```
//! `FIRST_CALL_DELAY_MS` makes the first `CreateOrder` slow, so `grpc_client`'s first try
//! hits its deadline and the retry gets the stored answer.

use std::time::Duration;

use idempotency_core::MemoryStore;
use tokio::net::TcpListener;
use tonic_payments::{PaymentsService, serve};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::var("GRPC_ADDR").unwrap_or_else(|_| "127.0.0.1:50051".to_owned());
    let delay = std::env::var("FIRST_CALL_DELAY_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map(Duration::from_millis)
        .unwrap_or(Duration::from_millis(1500));
    let listener = TcpListener::bind(&addr).await?;
    println!("Payments gRPC server on {addr} (first CreateOrder takes {delay:?})");
    let service = PaymentsService::new().with_first_call_delay(delay);
    serve(listener, service, MemoryStore::new()).await?;
    Ok(())
}
