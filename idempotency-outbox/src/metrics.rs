//! The relay's metric names, reported through the `metrics` facade with a `table` label.

/// Counter of messages delivered and marked sent.
pub const SENT: &str = "idempotency_outbox_sent_total";
/// Counter of failed deliveries, labelled `reason` = `refused` | `unreachable` | `deferred`
/// (only `refused` counts toward dead).
pub const FAILURES: &str = "idempotency_outbox_failures_total";
/// Counter of messages that went dead (refused `max_attempts` times).
pub const DEAD: &str = "idempotency_outbox_dead_total";
/// Counter of messages whose lease a delivering relay found lost when renewing it (another relay
/// may deliver them too).
pub const LEASES_LOST: &str = "idempotency_outbox_leases_lost_total";

/// Registers descriptions of the metrics above with the installed recorder.
pub fn describe() {
    metrics::describe_counter!(SENT, "Outbox messages delivered and marked sent");
    metrics::describe_counter!(FAILURES, "Outbox deliveries that failed, by reason");
    metrics::describe_counter!(DEAD, "Outbox messages that went dead");
    metrics::describe_counter!(
        LEASES_LOST,
        "Outbox messages whose lease was lost while being delivered"
    );
}
