//! A gRPC client that retries after a deadline with the same idempotency key and gets the same
//! answer; then replays a payment callback six times (the incident) for one coupon.
//!
//! ```text
//! cargo run -p tonic-payments --bin grpc_server &
//! cargo run -p tonic-payments --bin grpc_client
//! ```

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tonic_payments::proto::payments_client::PaymentsClient;
use tonic_payments::proto::{CreateOrderRequest, PaymentCallbackRequest};
use tonic_payments::{create_order_with_retries, with_key};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::var("GRPC_ADDR").unwrap_or_else(|_| "127.0.0.1:50051".to_owned());
    let mut client = PaymentsClient::connect(format!("http://{addr}")).await?;
    let nonce = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos();
    let key = format!("order-{nonce}");
    let order = CreateOrderRequest {
        customer: "alice".to_owned(),
        amount_cents: 4200,
    };

    let deadline = Duration::from_millis(300);
    let (answer, tries) =
        create_order_with_retries(&mut client, order.clone(), &key, deadline, 30).await;
    for (n, attempt) in tries.iter().enumerate() {
        println!(
            "try {}: {:?}{}",
            n + 1,
            attempt.code,
            if attempt.replayed { " (replayed)" } else { "" }
        );
    }
    let first = answer?.into_inner();
    println!("order {} (sequence {})", first.order_id, first.sequence);

    let again = client.create_order(with_key(order, &key)?).await?;
    let replayed = again.metadata().get("idempotent-replayed").is_some();
    let again = again.into_inner();
    println!(
        "same key again: order {} replayed={replayed}",
        again.order_id
    );
    assert_eq!(
        again, first,
        "a retry with the same key gets the same order"
    );

    let trade_no = format!("T{nonce}");
    let mut totals = Vec::new();
    for _ in 0..6 {
        let callback = PaymentCallbackRequest {
            trade_no: trade_no.clone(),
            order_id: first.order_id.clone(),
            amount_cents: first.amount_cents,
        };
        let ack = client
            .payment_callback(with_key(callback, &trade_no)?)
            .await?
            .into_inner();
        totals.push(ack.coupons_total);
    }
    println!("6 callbacks for {trade_no}: coupons_total seen {totals:?} (one coupon granted)");
    Ok(())
}
