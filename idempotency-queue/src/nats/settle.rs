//! [`Action`] → `+ACK` / `-NAK {delay}` / `+TERM`.

use async_nats::jetstream::{self, AckKind};

use crate::Action;

/// Tells JetStream what became of a message. A requeue is a `-NAK` with the delay, so the server
/// holds the message back for that long.
///
/// [`Action::Reject`] is a bare `+TERM`: the message is gone. A consumer never sends it for a
/// rejected message unless told to
/// ([`DeadLetters::drop_and_log`](super::DeadLetters::drop_and_log)).
pub async fn settle(message: &jetstream::Message, action: Action) -> Result<(), async_nats::Error> {
    let kind = match action {
        Action::Ack => AckKind::Ack,
        Action::Requeue { delay } if delay.is_zero() => AckKind::Nak(None),
        Action::Requeue { delay } => AckKind::Nak(Some(delay)),
        Action::Reject => AckKind::Term,
    };
    message.ack_with(kind).await
}
