//! Guarding a route is hard to get wrong: an `only_paths` entry that cannot match any request
//! stops the layer from being built, with a message naming it; what is guarded is logged once
//! at start-up (INFO, target `idempotency`), and the listed route is guarded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use common::{Calls, post_with_key, read, routes};
use idempotency_core::MemoryStore;
use idempotency_tower::IdempotencyLayer;
use tower::ServiceExt;

fn build_panic(paths: &[&str]) -> String {
    let paths: Vec<String> = paths.iter().map(|p| (*p).to_owned()).collect();
    let payload = std::panic::catch_unwind(|| {
        IdempotencyLayer::builder(MemoryStore::new())
            .namespace("orders")
            .only_paths(paths)
            .shared_scope()
            .build()
    })
    .expect_err("a path that cannot match must stop the build");
    payload
        .downcast_ref::<String>()
        .cloned()
        .expect("a panic message")
}

#[test]
fn a_path_that_cannot_match_stops_the_build_with_its_name() {
    let message = build_panic(&["/orders", "orders/refund", "/pay?x=1", "/orders/{id}"]);
    assert!(message.contains("namespace \"orders\""), "{message}");
    for named in ["\"orders/refund\"", "\"/pay?x=1\"", "\"/orders/{id}\""] {
        assert!(message.contains(named), "{named} missing from: {message}");
    }
    assert!(
        !message.contains("\"/orders\" "),
        "a good path is not named: {message}"
    );
    let message = build_panic(&[]);
    assert!(message.contains("guard nothing"), "{message}");
}

/// Log lines written by the `fmt` subscriber, kept for the test to read.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn what_is_guarded_is_logged_once_at_build_and_guarded() {
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let calls = Arc::new(Calls::default());
    let layer = tracing::subscriber::with_default(subscriber, || {
        IdempotencyLayer::builder(MemoryStore::new())
            .namespace("orders.guarded")
            .only_paths(["/orders"])
            .shared_scope()
            .build()
    });
    let logged = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = logged.lines().filter(|l| l.contains("guards")).collect();
    assert_eq!(lines.len(), 1, "{logged}");
    assert!(
        lines[0].contains("INFO") && lines[0].contains(" idempotency:"),
        "{logged}"
    );
    assert!(
        lines[0].contains("\"/orders\"") && lines[0].contains("orders.guarded"),
        "{logged}"
    );

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let app = routes(Arc::clone(&calls)).layer(layer);
        for _ in 0..2 {
            app.clone()
                .oneshot(post_with_key("/orders", Some("k-1"), "{}"))
                .await
                .unwrap();
        }
        let (_, headers, _) = read(
            app.clone()
                .oneshot(post_with_key("/orders", Some("k-1"), "{}"))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(headers["idempotent-replayed"], "true");
    });
    assert_eq!(calls.orders.load(Ordering::SeqCst), 1);
    let after = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert_eq!(after, logged, "logged at build only, not per request");
}
