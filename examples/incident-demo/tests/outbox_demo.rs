//! Runs `outbox_demo` against the real PostgreSQL (`DATABASE_URL`) and RabbitMQ (`AMQP_URL`):
//! every crash row must end with exactly one coupon, and the program must say so by its exit
//! status.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

fn reachable(service: &str, address: &str) -> bool {
    match std::net::TcpStream::connect(address) {
        Ok(_) => true,
        Err(error) => idempotency_test::unavailable::<()>(service, error).is_some(),
    }
}

#[test]
fn every_crash_ends_with_exactly_one_coupon_per_trade() {
    if !reachable("PostgreSQL", "127.0.0.1:5432") || !reachable("RabbitMQ", "127.0.0.1:5672") {
        return;
    }
    let output = Command::new(env!("CARGO_BIN_EXE_outbox_demo"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|line| line.ends_with("  ok"))
        .collect();
    assert_eq!(rows.len(), 5, "{stdout}");
    assert!(!stdout.contains("WRONG"), "{stdout}");
    // The crashes really happened: the relay killed after publishing and the coupon service
    // killed after its commit each made the survivors receive a copy to drop.
    for crash in [
        "relay killed after publishing",
        "coupon service killed after its commit",
    ] {
        let row = rows.iter().find(|row| row.contains(crash)).unwrap();
        let dropped: u64 = row
            .split_whitespace()
            .rev()
            .nth(2)
            .unwrap()
            .parse()
            .unwrap();
        assert!(dropped >= 1, "{row}");
    }
}
