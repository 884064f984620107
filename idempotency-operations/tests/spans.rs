//! An operator's action as a real `tracing` subscriber sees it: one `idempotency.admin` span
//! per action with the documented attribute names (action, key hash, fence, result), and the
//! raw key nowhere.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use idempotency_core::telemetry;
use idempotency_core::{
    Decision, Fingerprint, Idempotency, IdempotencyKey, InFlightPolicy, Mechanism, MemoryStore,
    Scope,
};
use idempotency_operations::{Acted, Actor, Admin, Fence, Step};
use idempotency_test::{KeptAudit, SpanCapture};
use tracing_subscriber::layer::SubscriberExt;

const RAW: &str = "raw-trade-number-7781";

#[test]
fn an_operator_release_runs_in_an_admin_span_with_its_fence_and_result() {
    let engine = Idempotency::new(MemoryStore::new()).with_lease(Duration::from_secs(600));
    let scope = Scope::new("payments.callback");
    let key = Admin::storage_key(&scope, Mechanism::Request, RAW);
    let capture = SpanCapture::new();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    tracing::subscriber::with_default(subscriber, || {
        runtime.block_on(async {
            let raw = IdempotencyKey::parse(RAW).unwrap();
            let begun = engine
                .claim(
                    &scope,
                    &raw,
                    &Fingerprint::of_bytes(b"x"),
                    InFlightPolicy::Reject,
                )
                .await;
            let Ok(Decision::Execute(execution)) = begun else {
                panic!("a new key executes");
            };
            let admin = Admin::from_shared(engine.shared_store(), Arc::new(KeptAudit::default()));
            let record = admin.inspect(&key).await.unwrap().unwrap();
            let actor = Actor::new("oncall", "INC-7: a stuck callback");
            let acted = admin
                .act(&key, Fence::of(&record), &actor, Step::Release)
                .await;
            assert!(matches!(acted, Ok(Acted::Applied)), "{acted:?}");
            // The same fence again: the record is gone, refused and named so.
            let again = admin
                .act(&key, Fence::of(&record), &actor, Step::Release)
                .await;
            assert!(matches!(again, Ok(Acted::Refused { .. })), "{again:?}");
            drop(execution);
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
