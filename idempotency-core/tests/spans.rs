//! The spans of `idempotency_core::telemetry`, as a real `tracing` subscriber sees them: an
//! operator's `idempotency.admin` span carries the documented attribute names, and the raw key
//! appears nowhere (spans or events). An idempotent function's `idempotency.guard` span is
//! checked in `idempotency-function`'s tests.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use idempotency_core::operations::{Acted, Actor, Admin, Fence};
use idempotency_core::telemetry;
use idempotency_core::{Decision, Fingerprint, Idempotency, IdempotencyKey, MemoryStore, Scope};
use idempotency_test::{KeptAudit, SpanCapture};
use tracing_subscriber::layer::SubscriberExt;

const RAW: &str = "raw-trade-number-7781";

fn with_capture<T>(run: impl FnOnce() -> T) -> (T, SpanCapture) {
    let capture = SpanCapture::new();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let value = tracing::subscriber::with_default(subscriber, run);
    (value, capture)
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

#[test]
fn an_operator_release_runs_in_an_admin_span_with_its_fence_and_result() {
    let engine = Idempotency::new(MemoryStore::new()).with_lease(Duration::from_secs(600));
    let scope = Scope::new("payments.callback");
    let raw = IdempotencyKey::parse(RAW).unwrap();
    let key = scope.storage_key(&raw);
    let (_, capture) = with_capture(|| {
        block_on(async {
            let fingerprint = Fingerprint::of_bytes(b"paid");
            let Ok(Decision::Execute(execution)) = engine.begin(&scope, &raw, &fingerprint).await
            else {
                panic!("a new key executes");
            };
            let admin = Admin::from_shared(engine.shared_store(), Arc::new(KeptAudit::default()));
            let record = admin.inspect(&key).await.unwrap().unwrap();
            let actor = Actor::new("oncall", "INC-7: a stuck callback");
            let acted = admin.release(&key, Fence::of(&record), &actor).await;
            assert!(matches!(acted, Ok(Acted::Applied)), "{acted:?}");
            // The same fence again: the record is gone, refused and named so.
            let again = admin.release(&key, Fence::of(&record), &actor).await;
            assert!(matches!(again, Ok(Acted::Refused { .. })), "{again:?}");
            drop(execution);
            record.token.get()
        })
    });
    let spans = capture.named(telemetry::ADMIN_SPAN);
    assert_eq!(spans.len(), 2, "{spans:?}");
    let token = spans[0].field(telemetry::FENCING_TOKEN).unwrap().to_owned();
    for (span, result) in spans.iter().zip(["applied", "absent"]) {
        assert_eq!(span.target, telemetry::TARGET);
        assert_eq!(span.field(telemetry::ADMIN_ACTION), Some("release"));
        assert_eq!(span.field(telemetry::KEY_HASH), Some(key.to_hex().as_str()));
        assert_eq!(span.field(telemetry::FENCING_TOKEN), Some(token.as_str()));
        assert_eq!(span.field(telemetry::ADMIN_RESULT), Some(result));
    }
    assert!(!capture.text().contains(RAW), "{}", capture.text());
}
