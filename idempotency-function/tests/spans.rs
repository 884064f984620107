//! The span of an idempotent function, as a real `tracing` subscriber sees it: a call's
//! `idempotency.guard` span (claim → work → complete, then a replay) carries the attribute names
//! of `idempotency_core::telemetry`, a failed call is released, a mismatch is named, and the raw
//! key appears nowhere (spans or events).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use idempotency_core::telemetry;
use idempotency_core::{Error, Idempotency, MemoryStore};
use idempotency_function::{self as function, Call};
use idempotency_test::SpanCapture;
use tracing_subscriber::Layer;
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
fn a_function_call_runs_in_one_guard_span_with_the_documented_attributes() {
    let engine = Idempotency::new(MemoryStore::new());
    let call = || Call::new("payments.refund", RAW);
    let storage_key = call().storage_key().to_hex();
    let (outputs, capture) = with_capture(|| {
        block_on(async {
            let mut outputs = Vec::new();
            for _ in 0..2 {
                let output: Result<u32, Error> =
                    function::run(engine.clone(), call(), |e| e, async { Ok(42) }).await;
                outputs.push(output.unwrap());
            }
            outputs
        })
    });
    assert_eq!(outputs, [42, 42]);
    let spans = capture.named(telemetry::GUARD_SPAN);
    assert_eq!(spans.len(), 2, "{spans:?}");
    let (first, replay) = (&spans[0], &spans[1]);
    assert_eq!(first.target, telemetry::TARGET);
    assert_eq!(first.field(telemetry::NAMESPACE), Some("payments.refund"));
    assert_eq!(first.field(telemetry::KEY_HASH), Some(storage_key.as_str()));
    assert_eq!(first.field(telemetry::DECISION), Some("execute"));
    assert_eq!(first.field(telemetry::ATTEMPT), Some("1"));
    assert!(first.field(telemetry::FENCING_TOKEN).is_some(), "{first:?}");
    assert_eq!(first.field(telemetry::FINISH), Some("completed"));
    assert_eq!(first.field(telemetry::ERROR_TYPE), None);
    assert_eq!(replay.field(telemetry::DECISION), Some("replay"));
    assert_eq!(
        replay.field(telemetry::KEY_HASH),
        Some(storage_key.as_str())
    );
    assert_eq!(replay.field(telemetry::ATTEMPT), None);
    let text = capture.text();
    assert!(text.contains(&storage_key), "{text}");
    assert!(!text.contains(RAW), "the raw key appears: {text}");
}

#[test]
fn a_failed_call_is_released_and_a_mismatch_is_named() {
    let engine = Idempotency::new(MemoryStore::new());
    let (_, capture) = with_capture(|| {
        block_on(async {
            let failed: Result<u32, Error> = function::run(
                engine.clone(),
                Call::new("payments.refund", RAW),
                |e| e,
                async { Err(Error::Backend("card network down".into())) },
            )
            .await;
            assert!(failed.is_err());
            let refund = |amount: u32| {
                let call = Call::new("payments.refund", RAW).fingerprint("amount", &amount);
                function::run(engine.clone(), call, |e| e, async move { Ok(amount) })
            };
            let ok: Result<u32, Error> = refund(1).await;
            assert_eq!(ok.unwrap(), 1);
            let other: Result<u32, Error> = refund(2).await;
            assert!(matches!(other, Err(Error::Mismatch)), "{other:?}");
        })
    });
    let spans = capture.named(telemetry::GUARD_SPAN);
    let decisions: Vec<_> = spans
        .iter()
        .map(|s| (s.field(telemetry::DECISION), s.field(telemetry::FINISH)))
        .collect();
    assert_eq!(
        decisions,
        [
            (Some("execute"), Some("released")),
            (Some("execute"), Some("completed")),
            (Some("mismatch"), None),
        ]
    );
    assert!(!capture.text().contains(RAW), "{}", capture.text());
}

#[test]
fn the_guard_span_is_at_debug_level() {
    let seen = |level| {
        let capture = SpanCapture::new();
        let subscriber = tracing_subscriber::registry().with(
            capture
                .clone()
                .with_filter(tracing_subscriber::filter::LevelFilter::from_level(level)),
        );
        let engine = Idempotency::new(MemoryStore::new());
        tracing::subscriber::with_default(subscriber, || {
            block_on(async {
                let output: Result<u32, Error> =
                    function::run(engine, Call::new("ns", RAW), |e| e, async { Ok(1) }).await;
                output.unwrap();
            })
        });
        capture.named(telemetry::GUARD_SPAN).len()
    };
    assert_eq!(
        seen(tracing::Level::INFO),
        0,
        "a service logging at INFO pays nothing"
    );
    assert_eq!(seen(tracing::Level::DEBUG), 1);
}
