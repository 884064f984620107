//! A delivery's `idempotency.guard` span (`idempotency_core::telemetry`), as a real `tracing`
//! subscriber sees it: the OpenTelemetry messaging attributes, the key as its hash, the
//! decision, how the work ended, the handler's failure as `error.type`; never the raw key, not
//! even as the message id of a consumer keyed by message id.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use idempotency_core::{Idempotency, MemoryStore, Scope, telemetry};
use idempotency_queue::{Handled, Header, IdempotentConsumer, Job, Message, MessageId, Verdict};
use idempotency_test::captured;

const RAW: &str = "raw-trade-no-9034";

#[test]
fn a_delivery_runs_in_one_span_with_the_messaging_attributes() {
    let consumer = IdempotentConsumer::new(
        Idempotency::new(MemoryStore::new()),
        Scope::new("coupon-grant"),
        Header::new("business-key"),
        |job: Job| async move {
            if job.message.payload().starts_with(b"fail") {
                return Err(std::io::Error::other("coupon service down"));
            }
            Ok(Handled::Output("coupon 7".into()))
        },
    );
    let message = |id: &str, payload: &'static str| {
        Message::new(payload)
            .with_message_id(id)
            .with_subject("orders.paid")
            .with_header("business-key", RAW)
    };
    let (verdicts, capture) = captured(async {
        vec![
            consumer.process(message("m-1", "order 42")).await,
            consumer.process(message("m-2", "order 42")).await,
            consumer
                .process(
                    Message::new("fail")
                        .with_message_id("m-3")
                        .with_subject("orders.paid")
                        .with_header("business-key", "other-key"),
                )
                .await,
        ]
    });
    assert!(
        matches!(verdicts[0], Verdict::Processed { .. }),
        "{verdicts:?}"
    );
    assert!(
        matches!(verdicts[1], Verdict::Replayed { .. }),
        "{verdicts:?}"
    );
    let spans = capture.named(telemetry::GUARD_SPAN);
    assert_eq!(spans.len(), 3, "{spans:?}");
    let key_hash = Scope::new("coupon-grant")
        .storage_key_for(idempotency_core::Mechanism::Message, RAW)
        .to_hex();
    let seen: Vec<_> = spans
        .iter()
        .map(|span| {
            assert_eq!(span.target, telemetry::TARGET);
            assert_eq!(span.field(telemetry::NAMESPACE), Some("coupon-grant"));
            assert_eq!(span.field(telemetry::DESTINATION), Some("orders.paid"));
            (
                span.field(telemetry::MESSAGE_ID),
                span.field(telemetry::DECISION),
                span.field(telemetry::FINISH),
                span.field(telemetry::ERROR_TYPE),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (Some("m-1"), Some("execute"), Some("completed"), None),
            (Some("m-2"), Some("replay"), None, None),
            (
                Some("m-3"),
                Some("execute"),
                Some("released"),
                Some("handler_error")
            ),
        ]
    );
    assert_eq!(spans[0].field(telemetry::KEY_HASH), Some(key_hash.as_str()));
    assert!(!capture.text().contains(RAW), "{}", capture.text());
}

#[test]
fn a_message_id_that_is_the_key_is_not_recorded() {
    let consumer = IdempotentConsumer::new(
        Idempotency::new(MemoryStore::new()),
        Scope::new("coupon-grant"),
        MessageId,
        |_job: Job| async move { Ok::<_, std::io::Error>(Handled::Done) },
    );
    let (verdict, capture) =
        captured(consumer.process(Message::new("order 42").with_message_id(RAW)));
    assert!(matches!(verdict, Verdict::Processed { .. }), "{verdict:?}");
    let spans = capture.named(telemetry::GUARD_SPAN);
    assert_eq!(spans.len(), 1, "{spans:?}");
    assert_eq!(spans[0].field(telemetry::MESSAGE_ID), None);
    assert_eq!(spans[0].field(telemetry::DECISION), Some("execute"));
    assert!(!capture.text().contains(RAW), "{}", capture.text());
}
