//! "Still working" (`+WPI`): a message whose handler runs long is marked in progress, so
//! JetStream does not redeliver it meanwhile.

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};

/// JetStream's `ack_wait` when a consumer sets none.
pub const DEFAULT_ACK_WAIT: Duration = Duration::from_secs(30);

/// How often [`serve`](super::serve) tells JetStream that a message is still being worked on
/// (`+WPI`) unless told otherwise: a third of [`DEFAULT_ACK_WAIT`].
pub const DEFAULT_PROGRESS_INTERVAL: Duration = Duration::from_secs(10);

/// The `+WPI` interval for a consumer whose `ack_wait` is `ack_wait`: a third of it, so that two
/// marks can be lost before JetStream redelivers; zero (unset) stands for [`DEFAULT_ACK_WAIT`].
///
/// ```
/// use std::time::Duration;
/// use idempotency_queue::nats::progress_interval;
/// assert_eq!(progress_interval(Duration::from_secs(3)), Duration::from_secs(1));
/// assert_eq!(progress_interval(Duration::ZERO), Duration::from_secs(10));
/// ```
pub fn progress_interval(ack_wait: Duration) -> Duration {
    let ack_wait = if ack_wait.is_zero() {
        DEFAULT_ACK_WAIT
    } else {
        ack_wait
    };
    ack_wait / 3
}

/// Awaits `work`, sending `+WPI` for `delivered` every `every` (never if zero) until it is
/// done. Work done within the first interval sends nothing.
pub(super) async fn reporting_progress<T>(
    delivered: &jetstream::Message,
    every: Duration,
    work: impl Future<Output = T>,
) -> T {
    if every.is_zero() {
        return work.await;
    }
    let mut work = pin!(work);
    loop {
        match tokio::time::timeout(every, work.as_mut()).await {
            Ok(output) => return output,
            Err(_elapsed) => {
                if let Err(error) = delivered.ack_with(AckKind::Progress).await {
                    tracing::debug!(%error, "could not mark a message in progress");
                }
            }
        }
    }
}
