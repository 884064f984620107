//! The NATS side of the coupon-grant example, shared by its consumer (`queue_nats`) and its
//! producer (`nats_publish`).

use std::time::Duration;

use async_nats::jetstream::{self, stream};

/// The server when `NATS_URL` is unset.
pub const DEFAULT_NATS_URL: &str = "nats://127.0.0.1:4222";

/// How long JetStream waits for an ack before it redelivers: what a consumer killed mid-message
/// costs its message. The consumer marks a message it is still working on every third of it.
pub const ACK_WAIT: Duration = Duration::from_secs(10);

/// `NATS_URL`, or the local server.
pub fn nats_url() -> String {
    std::env::var("NATS_URL").unwrap_or_else(|_| DEFAULT_NATS_URL.to_owned())
}

/// The stream that keeps `subject`'s messages: the subject, upper-cased, with every character
/// a stream name may not hold (`.`, `*`, `>`, white space) as `_`.
///
/// ```
/// assert_eq!(nats_consumer::stream_name("coupon-grant"), "COUPON-GRANT");
/// assert_eq!(nats_consumer::stream_name("pay.paid"), "PAY_PAID");
/// ```
pub fn stream_name(subject: &str) -> String {
    subject
        .chars()
        .map(|c| match c {
            '.' | '*' | '>' => '_',
            c if c.is_whitespace() => '_',
            c => c.to_ascii_uppercase(),
        })
        .collect()
}

/// Creates the stream for `subject` unless it exists, as both sides expect it.
pub async fn ensure_stream(
    js: &jetstream::Context,
    subject: &str,
) -> Result<stream::Stream, async_nats::Error> {
    Ok(js
        .get_or_create_stream(stream::Config {
            name: stream_name(subject),
            subjects: vec![subject.to_owned()],
            ..Default::default()
        })
        .await?)
}
