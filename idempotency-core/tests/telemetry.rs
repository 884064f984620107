//! The engine's tracing events carry the documented field names (namespace, key as the storage
//! key, decision, attempt, fencing token, status), and never the raw key.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::Write;
use std::sync::{Arc, Mutex};

use idempotency_core::{
    Decision, Fingerprint, Idempotency, IdempotencyKey, InFlightPolicy, MemoryStore, Outcome, Scope,
};

/// The formatted events, kept.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn claim_events_name_their_fields_and_hide_the_raw_key() {
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let raw = "raw-trade-number-7781";
    let scope = Scope::new("payments.callback");
    let key = IdempotencyKey::parse(raw).unwrap();
    let token = tracing::subscriber::with_default(subscriber, || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let engine = Idempotency::new(MemoryStore::new());
            let fingerprint = Fingerprint::of_bytes(b"order 42");
            let Decision::Execute(execution) = engine
                .claim(&scope, &key, &fingerprint, InFlightPolicy::Reject)
                .await
                .unwrap()
            else {
                panic!("a fresh key executes");
            };
            let token = execution.token().get();
            execution
                .complete(Outcome::new(200, "granted"))
                .await
                .unwrap();
            let replay = engine
                .claim(&scope, &key, &fingerprint, InFlightPolicy::Reject)
                .await
                .unwrap();
            assert!(matches!(replay, Decision::Replay(_)));
            token
        })
    });
    let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    let storage_key = scope.storage_key(&key).to_hex();
    assert!(text.contains(&format!(
        "namespace=\"payments.callback\" key={storage_key} decision=\"execute\" attempt=1 fencing_token={token}"
    )), "{text}");
    assert!(text.contains("decision=\"replay\" status=200"), "{text}");
    assert!(!text.contains(raw), "no event carries the raw key: {text}");
}
