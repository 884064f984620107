//! [`Action`] → `basic.ack` / `basic.nack` / `basic.reject`.

use lapin::Acker;
use lapin::options::{BasicAckOptions, BasicNackOptions, BasicRejectOptions};

use crate::Action;

/// Tells RabbitMQ what became of a delivery.
///
/// [`Action::Reject`] is a bare `basic.reject` without requeue: the message is gone unless its
/// queue has a dead-letter exchange. A consumer never sends it for a rejected delivery unless
/// told to ([`DeadLetters::drop_and_log`](super::DeadLetters::drop_and_log)).
///
/// A requeue with a delay holds the message (unacked) for the delay in a background task, then
/// nacks it with `requeue = true`; if the channel closes meanwhile the broker redelivers it
/// anyway. A requeue without delay and the other actions are sent before returning.
pub async fn settle(acker: &Acker, action: Action) -> Result<(), lapin::Error> {
    match action {
        Action::Ack => acker.ack(BasicAckOptions::default()).await.map(drop),
        Action::Reject => acker
            .reject(BasicRejectOptions { requeue: false })
            .await
            .map(drop),
        Action::Requeue { delay } if delay.is_zero() => requeue(acker).await,
        Action::Requeue { delay } => {
            let acker = acker.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                if let Err(error) = requeue(&acker).await {
                    tracing::warn!(%error, "delayed requeue failed; the broker redelivers when the channel closes");
                }
            });
            Ok(())
        }
    }
}

async fn requeue(acker: &Acker) -> Result<(), lapin::Error> {
    acker
        .nack(BasicNackOptions {
            requeue: true,
            multiple: false,
        })
        .await
        .map(drop)
}
