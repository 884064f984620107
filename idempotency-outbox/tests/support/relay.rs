//! The loops that drive a relay in the relay tests.

use std::time::{Duration, Instant};

use idempotency_outbox::table::OutboxTable;
use idempotency_outbox::{Relay, Round, Target};

/// Runs rounds until `count` messages were sent (waiting out a dead relay's lease, or a broker
/// coming back), failing the test after `limit`.
pub(crate) async fn deliver_until_sent<O: OutboxTable, T: Target>(
    relay: &Relay<O, T>,
    count: usize,
    limit: Duration,
) {
    let deadline = Instant::now() + limit;
    let mut sent = 0;
    while sent < count {
        assert!(
            Instant::now() < deadline,
            "only {sent} of {count} messages delivered within {limit:?}"
        );
        let round = relay.deliver_due().await.unwrap();
        sent += round.sent;
        if round.sent == 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Runs rounds until one message went dead (a relay whose backoff is short); the rounds'
/// totals.
pub(crate) async fn refuse_until_dead<O: OutboxTable, T: Target>(relay: &Relay<O, T>) -> Round {
    let mut total = Round::default();
    for _ in 0..200 {
        total += relay.deliver_due().await.unwrap();
        if total.dead > 0 {
            return total;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("never dead: {total:?}");
}
