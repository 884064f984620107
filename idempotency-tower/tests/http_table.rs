//! Every row of the contract's HTTP table, through a real axum Router in process.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use common::{Calls, Partitionable, post_with_key, problem, read, routes, unique};
use idempotency_core::{BoxStore, MemoryStore};
use idempotency_tower::{IdempotencyLayer, IdempotencyLayerBuilder, ScopeChosen};
use tower::ServiceExt;

fn app(
    configure: impl FnOnce(
        IdempotencyLayerBuilder<Arc<MemoryStore>, ScopeChosen>,
    ) -> IdempotencyLayerBuilder<Arc<MemoryStore>, ScopeChosen>,
) -> (Router, Arc<Calls>, Arc<MemoryStore>) {
    let store = Arc::new(MemoryStore::new());
    let calls = Arc::new(Calls::default());
    let layer = configure(IdempotencyLayer::builder(Arc::clone(&store)).shared_scope()).build();
    (routes(Arc::clone(&calls)).layer(layer), calls, store)
}

#[tokio::test]
async fn first_request_then_identical_replay() {
    let (app, calls, _) = app(|b| b);
    let key = unique("order");
    let first = app
        .clone()
        .oneshot(post_with_key("/orders", Some(&key), r#"{"amount":10}"#))
        .await
        .unwrap();
    let (status, headers, body) = read(first).await;
    assert_eq!(status, 201);
    assert!(!headers.contains_key("idempotent-replayed"));
    assert_eq!(
        headers["set-cookie"], "session=s3cr3t",
        "the first answer is the handler's own"
    );

    let retry = app
        .clone()
        .oneshot(post_with_key("/orders", Some(&key), r#"{"amount":10}"#))
        .await
        .unwrap();
    let (replay_status, replay_headers, replay_body) = read(retry).await;
    assert_eq!(replay_status, status);
    assert_eq!(replay_body, body);
    assert_eq!(replay_headers["idempotent-replayed"], "true");
    for (name, value) in &headers {
        match name.as_str() {
            "set-cookie" | "date" | "connection" => assert!(
                !replay_headers.contains_key(name),
                "{name} must not be replayed"
            ),
            _ => assert_eq!(
                replay_headers.get_all(name).iter().collect::<Vec<_>>(),
                headers.get_all(name).iter().collect::<Vec<_>>(),
                "{name}: {value:?}"
            ),
        }
    }
    assert_eq!(replay_headers.len(), headers.len() - 3 + 1);
    assert_eq!(calls.orders.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn replays_carry_the_content_length_of_the_first_answer_once() {
    // The layer stores the Content-Length the server adds (a replay then needs no new one);
    // the replay's must be the first answer's, never a second value, and none where none goes.
    let (app, _, _) = app(|b| b);
    for code in [200, 201, 204, 404, 422] {
        let key = unique("length");
        let uri = format!("/status?code={code}");
        let mut seen = Vec::new();
        for _ in 0..2 {
            let response = app
                .clone()
                .oneshot(post_with_key(&uri, Some(&key), "{}"))
                .await
                .unwrap();
            let (status, headers, body) = read(response).await;
            assert_eq!(status, code);
            let lengths: Vec<_> = headers.get_all("content-length").iter().cloned().collect();
            if code != 204 {
                assert_eq!(lengths, [body.len().to_string()], "{code}");
            }
            seen.push((lengths, body, headers.contains_key("idempotent-replayed")));
        }
        assert_eq!(seen[0].0, seen[1].0, "{code}");
        assert_eq!(seen[0].1, seen[1].1, "{code}");
        assert_eq!((seen[0].2, seen[1].2), (false, true), "{code}");
    }
}

#[tokio::test]
async fn quoted_and_bare_keys_are_the_same_key() {
    let (app, calls, _) = app(|b| b);
    let key = unique("q");
    let first = app
        .clone()
        .oneshot(post_with_key("/orders", Some(&format!("\"{key}\"")), "{}"))
        .await
        .unwrap();
    assert_eq!(first.status(), 201);
    let retry = app
        .oneshot(post_with_key("/orders", Some(&key), "{}"))
        .await
        .unwrap();
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(calls.orders.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn set_cookie_is_replayed_only_when_enabled() {
    let (app, _, _) = app(|b| b.store_sensitive_headers(true));
    let key = unique("cookie");
    app.clone()
        .oneshot(post_with_key("/orders", Some(&key), "{}"))
        .await
        .unwrap();
    let retry = app
        .oneshot(post_with_key("/orders", Some(&key), "{}"))
        .await
        .unwrap();
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(retry.headers()["set-cookie"], "session=s3cr3t");
    assert!(!retry.headers().contains_key("date"));
}

#[tokio::test]
async fn in_flight_duplicate_gets_409_with_retry_after() {
    let (app, calls, _) = app(|b| b);
    let key = unique("held");
    let first = tokio::spawn(
        app.clone()
            .oneshot(post_with_key("/held", Some(&key), "{}")),
    );
    calls.held_started.notified().await;
    let duplicate = app
        .clone()
        .oneshot(post_with_key("/held", Some(&key), "{}"))
        .await
        .unwrap();
    let retry_after: u64 = duplicate.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry_after >= 1);
    let body = problem(duplicate, 409).await;
    assert_eq!(body["type"], "urn:idempotency:in-flight");
    calls.held_release.notify_one();
    assert_eq!(first.await.unwrap().unwrap().status(), 200);
    let later = app
        .oneshot(post_with_key("/held", Some(&key), "{}"))
        .await
        .unwrap();
    assert_eq!(later.headers()["idempotent-replayed"], "true");
    assert_eq!(calls.held.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn wait_mode_replays_the_first_answer() {
    let (app, calls, _) = app(|b| b.wait_in_flight(Duration::from_secs(30)));
    let key = unique("wait");
    let first = tokio::spawn(
        app.clone()
            .oneshot(post_with_key("/held", Some(&key), "{}")),
    );
    calls.held_started.notified().await;
    let duplicate = tokio::spawn(app.oneshot(post_with_key("/held", Some(&key), "{}")));
    // Whether the duplicate is already waiting or arrives after the first finished, it gets
    // the first answer replayed.
    tokio::time::sleep(Duration::from_millis(50)).await;
    calls.held_release.notify_one();
    let (status, headers, body) = read(duplicate.await.unwrap().unwrap()).await;
    assert_eq!(status, 200);
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(body, "held 1");
    let (_, first_headers, first_body) = read(first.await.unwrap().unwrap()).await;
    assert!(!first_headers.contains_key("idempotent-replayed"));
    assert_eq!(first_body, body);
    assert_eq!(calls.held.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn same_key_other_payload_is_422_and_leaves_the_record() {
    let (app, calls, _) = app(|b| b);
    let key = unique("mismatch");
    let (_, _, original) = read(
        app.clone()
            .oneshot(post_with_key("/orders", Some(&key), r#"{"amount":10}"#))
            .await
            .unwrap(),
    )
    .await;
    let refused = app
        .clone()
        .oneshot(post_with_key("/orders", Some(&key), r#"{"amount":99}"#))
        .await
        .unwrap();
    let body = problem(refused, 422).await;
    assert_eq!(body["type"], "urn:idempotency:key-reused");
    // Another path with the same key and body is another payload too.
    let other_path = app
        .clone()
        .oneshot(post_with_key("/orders?x=1", Some(&key), r#"{"amount":10}"#))
        .await
        .unwrap();
    problem(other_path, 422).await;
    let (_, headers, replayed) = read(
        app.oneshot(post_with_key("/orders", Some(&key), r#"{"amount":10}"#))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(replayed, original);
    assert_eq!(calls.orders.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn missing_key_is_400_where_required() {
    let (app, calls, store) = app(|b| b);
    let body = problem(
        app.oneshot(post_with_key("/orders", None, "{}"))
            .await
            .unwrap(),
        400,
    )
    .await;
    assert_eq!(body["type"], "urn:idempotency:missing-key");
    assert_eq!(calls.orders.load(Ordering::SeqCst), 0);
    assert!(store.is_empty());
}

#[tokio::test]
async fn missing_key_passes_through_where_optional() {
    let (app, calls, store) = app(|b| b.require_key(false));
    for n in 1..=2 {
        let (status, headers, _) = read(
            app.clone()
                .oneshot(post_with_key("/orders", None, "{}"))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 201);
        assert!(!headers.contains_key("idempotent-replayed"));
        assert_eq!(calls.orders.load(Ordering::SeqCst), n);
    }
    assert!(store.is_empty());
    // With a key the optional endpoint is still guarded.
    let key = unique("opt");
    app.clone()
        .oneshot(post_with_key("/orders", Some(&key), "{}"))
        .await
        .unwrap();
    let retry = app
        .oneshot(post_with_key("/orders", Some(&key), "{}"))
        .await
        .unwrap();
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
}

#[tokio::test]
async fn invalid_keys_are_400_nothing_stored_handler_not_run() {
    let (app, calls, store) = app(|b| b);
    let too_long = "a".repeat(256);
    let bad: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"\"\"".to_vec(),
        too_long.as_bytes().to_vec(),
        b"a\tb".to_vec(),
        b"\"a\tb\"".to_vec(),
        "cl\u{e9}".as_bytes().to_vec(),
        b"\"unterminated".to_vec(),
        b"a b".to_vec(),
    ];
    for value in bad {
        let request = http::Request::post("/orders")
            .header(
                "idempotency-key",
                http::HeaderValue::from_bytes(&value).unwrap(),
            )
            .body(Body::from("{}"))
            .unwrap();
        let body = problem(app.clone().oneshot(request).await.unwrap(), 400).await;
        assert_eq!(body["type"], "urn:idempotency:invalid-key", "{value:?}");
    }
    let two = http::Request::post("/orders")
        .header("idempotency-key", "k1")
        .header("idempotency-key", "k2")
        .body(Body::from("{}"))
        .unwrap();
    let body = problem(app.clone().oneshot(two).await.unwrap(), 400).await;
    assert_eq!(body["type"], "urn:idempotency:invalid-key");
    // 255 characters is still a key.
    let longest = app
        .oneshot(post_with_key("/orders", Some(&"k".repeat(255)), "{}"))
        .await
        .unwrap();
    assert_eq!(longest.status(), 201);
    assert_eq!(calls.orders.load(Ordering::SeqCst), 1);
    assert_eq!(store.len(), 1);
}

#[tokio::test]
async fn body_larger_than_the_limit_is_413() {
    let (app, calls, store) = app(|b| b.max_body_bytes(16));
    let key = unique("big");
    let body = problem(
        app.clone()
            .oneshot(post_with_key("/orders", Some(&key), &"x".repeat(17)))
            .await
            .unwrap(),
        413,
    )
    .await;
    assert_eq!(body["type"], "urn:idempotency:body-too-large");
    // Declared by Content-Length, refused before reading.
    let declared = http::Request::post("/orders")
        .header("idempotency-key", key.as_str())
        .header("content-length", "1000000")
        .body(Body::from("x".repeat(17)))
        .unwrap();
    problem(app.clone().oneshot(declared).await.unwrap(), 413).await;
    assert_eq!(calls.orders.load(Ordering::SeqCst), 0);
    assert!(store.is_empty());
    let fits = app
        .oneshot(post_with_key("/orders", Some(&key), &"x".repeat(16)))
        .await
        .unwrap();
    assert_eq!(fits.status(), 201);
}

#[tokio::test]
async fn store_unavailable_is_503_with_retry_after() {
    let store = Arc::new(Partitionable::default());
    let calls = Arc::new(Calls::default());
    let layer = IdempotencyLayer::builder(BoxStore::new(Arc::clone(&store)))
        .shared_scope()
        .store_timeout(Duration::from_millis(50))
        .unavailable_retry_after(Duration::from_secs(3))
        .build();
    let app = routes(Arc::clone(&calls)).layer(layer);
    store.down.store(true, Ordering::SeqCst);
    let refused = app
        .clone()
        .oneshot(post_with_key("/orders", Some("k"), "{}"))
        .await
        .unwrap();
    assert_eq!(refused.headers()["retry-after"], "3");
    let body = problem(refused, 503).await;
    assert_eq!(body["type"], "urn:idempotency:store-unavailable");
    assert_eq!(calls.orders.load(Ordering::SeqCst), 0);
    // Back up: the same key runs now (the refusal was not stored).
    store.down.store(false, Ordering::SeqCst);
    let ok = app
        .oneshot(post_with_key("/orders", Some("k"), "{}"))
        .await
        .unwrap();
    assert_eq!(ok.status(), 201);
    assert!(!ok.headers().contains_key("idempotent-replayed"));
}

#[tokio::test]
async fn a_request_dropped_during_its_claim_leaves_the_key_free() {
    // The client leaves while the claim is on its way to the store: the claim still lands
    // (in the background), and the key it took is given back at once, so the client's retry
    // runs the handler instead of meeting a 60-s lease that no handler renews.
    let store = Arc::new(Partitionable::default());
    store.claim_delay_ms.store(300, Ordering::SeqCst);
    let calls = Arc::new(Calls::default());
    let layer = IdempotencyLayer::builder(BoxStore::new(Arc::clone(&store)))
        .shared_scope()
        .lease(Duration::from_secs(60))
        .build();
    let app = routes(Arc::clone(&calls)).layer(layer);
    let key = unique("left-mid-claim");
    let dropped = tokio::time::timeout(
        Duration::from_millis(50),
        app.clone()
            .oneshot(post_with_key("/orders", Some(&key), "{}")),
    )
    .await;
    assert!(
        dropped.is_err(),
        "the request must still be claiming at 50 ms"
    );
    // The background claim lands at ~300 ms and takes the key: it must give it back.
    tokio::time::sleep(Duration::from_millis(600)).await;
    store.claim_delay_ms.store(0, Ordering::SeqCst);
    let retried = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let response = app
                .clone()
                .oneshot(post_with_key("/orders", Some(&key), "{}"))
                .await
                .unwrap();
            if response.status() != 409 {
                return response;
            }
        }
    })
    .await
    .expect("the key was released, not left in flight until its lease ended");
    assert_eq!(retried.status(), 201);
    assert!(!retried.headers().contains_key("idempotent-replayed"));
    assert_eq!(
        calls.orders.load(Ordering::SeqCst),
        1,
        "the first request never ran"
    );
}

#[test]
fn store_unavailable_fails_open_when_configured_logged_and_counted() {
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let store = Arc::new(Partitionable::default());
            let calls = Arc::new(Calls::default());
            let layer = IdempotencyLayer::builder(BoxStore::new(Arc::clone(&store)))
                .shared_scope()
                .namespace("fail-open")
                .store_timeout(Duration::from_millis(30))
                .fail_open(true)
                .build();
            let app = routes(Arc::clone(&calls)).layer(layer);
            store.down.store(true, Ordering::SeqCst);
            for n in 1..=2 {
                let (status, headers, body) = read(
                    app.clone()
                        .oneshot(post_with_key("/orders", Some("k"), r#"{"a":1}"#))
                        .await
                        .unwrap(),
                )
                .await;
                assert_eq!(status, 201);
                assert!(!headers.contains_key("idempotent-replayed"));
                // The handler saw the body the layer had read.
                let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
                assert_eq!(json["echo"], r#"{"a":1}"#);
                assert_eq!(calls.orders.load(Ordering::SeqCst), n);
            }
        })
    });
    let counted: u64 = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == idempotency_core::metrics::FAIL_OPEN)
        .map(|(.., value)| match value {
            metrics_util::debugging::DebugValue::Counter(n) => n,
            _ => 0,
        })
        .sum();
    assert_eq!(counted, 2);
}

#[tokio::test]
async fn other_methods_pass_through() {
    let (app, calls, store) = app(|b| b);
    for n in 1..=2 {
        let request = http::Request::get("/orders")
            .header("idempotency-key", "k")
            .body(Body::empty())
            .unwrap();
        let (status, headers, body) = read(app.clone().oneshot(request).await.unwrap()).await;
        assert_eq!(status, 200);
        assert!(!headers.contains_key("idempotent-replayed"));
        assert_eq!(body, format!("list {n}"));
    }
    // An invalid key on a method that passes through is not even looked at.
    let request = http::Request::get("/orders")
        .header("idempotency-key", "")
        .body(Body::empty())
        .unwrap();
    assert_eq!(app.oneshot(request).await.unwrap().status(), 200);
    assert!(store.is_empty());
    assert_eq!(calls.list.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn configured_methods_are_guarded() {
    let (app, calls, _) = app(|b| b.methods([http::Method::GET]));
    let key = unique("get");
    for _ in 0..2 {
        let request = http::Request::get("/list")
            .header("idempotency-key", key.as_str())
            .body(Body::empty())
            .unwrap();
        app.clone().oneshot(request).await.unwrap();
    }
    assert_eq!(calls.list.load(Ordering::SeqCst), 1);
    // POST is no longer guarded.
    app.clone()
        .oneshot(post_with_key("/orders", None, "{}"))
        .await
        .unwrap();
    assert_eq!(calls.orders.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn server_errors_release_the_key() {
    let (app, calls, _) = app(|b| b);
    let key = unique("5xx");
    for n in 1..=2 {
        let (status, headers, body) = read(
            app.clone()
                .oneshot(post_with_key("/fail", Some(&key), "{}"))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 500);
        assert!(!headers.contains_key("idempotent-replayed"));
        assert_eq!(body, format!("failure {n}"));
    }
    assert_eq!(calls.fail.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn server_errors_are_stored_when_configured() {
    let (app, calls, _) = app(|b| b.store_server_errors());
    let key = unique("stripe");
    app.clone()
        .oneshot(post_with_key("/fail", Some(&key), "{}"))
        .await
        .unwrap();
    let (status, headers, body) = read(
        app.oneshot(post_with_key("/fail", Some(&key), "{}"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 500);
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(body, "failure 1");
    assert_eq!(calls.fail.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn client_errors_are_stored_except_retryable_ones() {
    for (code, stored) in [
        (400, true),
        (404, true),
        (422, true),
        (408, false),
        (409, false),
        (425, false),
        (429, false),
    ] {
        let (app, calls, _) = app(|b| b);
        let key = unique("4xx");
        let uri = format!("/status?code={code}");
        app.clone()
            .oneshot(post_with_key(&uri, Some(&key), "{}"))
            .await
            .unwrap();
        let (status, headers, body) = read(
            app.oneshot(post_with_key(&uri, Some(&key), "{}"))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status.as_u16(), code);
        assert_eq!(
            headers.contains_key("idempotent-replayed"),
            stored,
            "{code}"
        );
        let runs = if stored { 1 } else { 2 };
        assert_eq!(body, format!("answer {runs}"));
        assert_eq!(calls.status.load(Ordering::SeqCst), runs, "{code}");
    }
}

#[tokio::test]
async fn tenants_never_share_responses() {
    let (app, calls, _) = app(|b| b.principal_header(http::HeaderName::from_static("x-tenant")));
    let key = unique("shared");
    let send = |tenant: &'static str| {
        let mut request = post_with_key("/orders", Some(&key), "{}");
        request
            .headers_mut()
            .insert("x-tenant", http::HeaderValue::from_static(tenant));
        app.clone().oneshot(request)
    };
    let (_, a_headers, a_body) = read(send("acme").await.unwrap()).await;
    let (_, b_headers, b_body) = read(send("globex").await.unwrap()).await;
    assert!(!a_headers.contains_key("idempotent-replayed"));
    assert!(
        !b_headers.contains_key("idempotent-replayed"),
        "tenant B must not get tenant A's answer"
    );
    assert_ne!(a_body, b_body);
    let (_, again, a_again) = read(send("acme").await.unwrap()).await;
    assert_eq!(again["idempotent-replayed"], "true");
    assert_eq!(a_again, a_body);
    let (_, _, b_again) = read(send("globex").await.unwrap()).await;
    assert_eq!(b_again, b_body);
    assert_eq!(calls.orders.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn key_from_json_body() {
    let (app, calls, store) = app(|b| {
        b.key_from_json("/trade_no")
            .fingerprint_json_fields(["/amount"])
    });
    let trade = unique("T");
    let body = format!(r#"{{"trade_no":"{trade}","amount":5,"sent_at":1}}"#);
    let (_, _, first) = read(
        app.clone()
            .oneshot(post_with_key("/orders", None, &body))
            .await
            .unwrap(),
    )
    .await;
    // A retry with another timestamp is the same request: only /amount is fingerprinted.
    let retry = format!(r#"{{"sent_at":2,"amount":5,"trade_no":"{trade}"}}"#);
    let (_, headers, replayed) = read(
        app.clone()
            .oneshot(post_with_key("/orders", None, &retry))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(replayed, first);
    // Numbers are keys by their text.
    let numeric = app
        .clone()
        .oneshot(post_with_key(
            "/orders",
            None,
            r#"{"trade_no":4242,"amount":1}"#,
        ))
        .await
        .unwrap();
    assert_eq!(numeric.status(), 201);
    let again = app
        .clone()
        .oneshot(post_with_key(
            "/orders",
            None,
            r#"{"trade_no":4242,"amount":1}"#,
        ))
        .await
        .unwrap();
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(calls.orders.load(Ordering::SeqCst), 2);
    let records = store.len();

    for bad in [
        r#"{"trade_no":"#,
        "not json",
        r#"{"trade_no":true}"#,
        r#"{"trade_no":{"a":1}}"#,
    ] {
        let body = problem(
            app.clone()
                .oneshot(post_with_key("/orders", None, bad))
                .await
                .unwrap(),
            400,
        )
        .await;
        assert_eq!(body["type"], "urn:idempotency:malformed-body", "{bad}");
    }
    let body = problem(
        app.clone()
            .oneshot(post_with_key("/orders", None, r#"{"amount":1}"#))
            .await
            .unwrap(),
        400,
    )
    .await;
    assert_eq!(body["type"], "urn:idempotency:missing-key");
    let body = problem(
        app.oneshot(post_with_key("/orders", None, r#"{"trade_no":""}"#))
            .await
            .unwrap(),
        400,
    )
    .await;
    assert_eq!(body["type"], "urn:idempotency:invalid-key");
    assert_eq!(calls.orders.load(Ordering::SeqCst), 2);
    assert_eq!(store.len(), records);
}

#[tokio::test]
async fn key_from_a_user_function() {
    let (app, calls, _) = app(|b| {
        b.key_with(|parts, _body| {
            parts
                .uri
                .query()
                .and_then(|q| q.strip_prefix("op="))
                .map(idempotency_core::IdempotencyKey::parse)
                .transpose()
        })
    });
    let key = unique("op");
    app.clone()
        .oneshot(post_with_key(&format!("/orders?op={key}"), None, "{}"))
        .await
        .unwrap();
    let retry = app
        .oneshot(post_with_key(&format!("/orders?op={key}"), None, "{}"))
        .await
        .unwrap();
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(calls.orders.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn responses_over_the_stored_limit_reach_the_client_and_never_run_twice() {
    let (app, calls, store) = app(|b| b.max_stored_response_bytes(64));
    let key = unique("large");
    let (status, headers, body) = read(
        app.clone()
            .oneshot(post_with_key("/big", Some(&key), &"y".repeat(100)))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert!(!headers.contains_key("idempotent-replayed"));
    assert_eq!(body.len(), 100, "the first client gets the whole response");

    // The work is done: a retry is told so instead of running the handler again.
    let retry = app
        .oneshot(post_with_key("/big", Some(&key), &"y".repeat(100)))
        .await
        .unwrap();
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    let problem = problem(retry, 409).await;
    assert!(
        problem["detail"].as_str().unwrap().contains("status 200"),
        "{problem}"
    );
    assert_eq!(calls.big.load(Ordering::SeqCst), 1);
    assert_eq!(store.len(), 1, "the key stays taken");
}

#[tokio::test]
async fn slow_handler_keeps_its_lease() {
    // The handler runs for several leases; keep-alive renews the lease, so a duplicate arriving
    // long after the first lease would have ended is still refused instead of taking over.
    // A lease of 1 s renewed every third of it leaves 2/3 s of slack for a loaded CI machine.
    let (app, calls, _) = app(|b| b.lease(Duration::from_millis(1000)));
    let key = unique("lease");
    let first = tokio::spawn(
        app.clone()
            .oneshot(post_with_key("/held", Some(&key), "{}")),
    );
    calls.held_started.notified().await;
    tokio::time::sleep(Duration::from_millis(3300)).await;
    let duplicate = app
        .clone()
        .oneshot(post_with_key("/held", Some(&key), "{}"))
        .await
        .unwrap();
    problem(duplicate, 409).await;
    calls.held_release.notify_one();
    assert_eq!(first.await.unwrap().unwrap().status(), 200);
    let replay = app
        .oneshot(post_with_key("/held", Some(&key), "{}"))
        .await
        .unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(calls.held.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_duplicates_run_the_handler_once() {
    let (app, calls, _) = app(|b| b);
    let key = unique("burst");
    let requests: Vec<_> = (0..200)
        .map(|_| {
            tokio::spawn(
                app.clone()
                    .oneshot(post_with_key("/slow?ms=50", Some(&key), "{}")),
            )
        })
        .collect();
    let mut executed = 0;
    for request in requests {
        let (status, headers, body) = read(request.await.unwrap().unwrap()).await;
        match status.as_u16() {
            200 if headers.contains_key("idempotent-replayed") => assert_eq!(body, "slow 1"),
            200 => executed += 1,
            409 => assert!(headers.contains_key("retry-after")),
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!(executed, 1);
    assert_eq!(calls.slow.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_duplicates_in_wait_mode_all_get_the_answer() {
    // All may wait (beyond the default bound of 128, they would be answered 409 at once).
    let (app, calls, _) = app(|b| {
        b.wait_in_flight(Duration::from_secs(30))
            .max_waiters_per_key(200)
    });
    let key = unique("burst-wait");
    let requests: Vec<_> = (0..200)
        .map(|_| {
            tokio::spawn(
                app.clone()
                    .oneshot(post_with_key("/slow?ms=50", Some(&key), "{}")),
            )
        })
        .collect();
    for request in requests {
        let (status, _, body) = read(request.await.unwrap().unwrap()).await;
        assert_eq!(status, 200);
        assert_eq!(body, "slow 1");
    }
    assert_eq!(calls.slow.load(Ordering::SeqCst), 1);
}
