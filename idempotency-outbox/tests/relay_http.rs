//! The HTTP relay target against a real PostgreSQL outbox (`DATABASE_URL`) and a real HTTP
//! endpoint guarded by `idempotency-tower`'s layer: the message id arrives as
//! `Idempotency-Key`, so a batch posted again after its relay died runs the handler once; an
//! error status is refused until dead; a closed port is unreachable; a 409 (the same key in
//! flight at the receiver) or a 429 defers the message without counting a failure; a relay
//! archives what it purges.
#![cfg(all(feature = "postgres", feature = "http"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::post;
use idempotency_core::MemoryStore;
use idempotency_outbox::http::HttpTarget;
use idempotency_outbox::table::{Archive, Claimed, OutboxTable};
use idempotency_outbox::{Relay, Target};
use idempotency_queue::Backoff;
use idempotency_tower::IdempotencyLayer;
use support::relay::{deliver_until_sent, refuse_until_dead};
use support::{TestOutbox, enqueue_committed, fresh_outbox, message};

/// Handler runs and requests of the endpoint.
#[derive(Default)]
struct Counts {
    runs: AtomicUsize,
    requests: AtomicUsize,
    slow_runs: AtomicUsize,
    busy_calls: AtomicUsize,
}

/// How long `POST /slow` takes.
const SLOW: Duration = Duration::from_millis(1500);

/// Serves, behind the idempotency layer on a free loopback port: `POST /grants` (200,
/// counted), `POST /broken` (500), `POST /slow` (200 after [`SLOW`], counted) and `POST /busy`
/// (429 with `Retry-After: 1` the first time, then 200); its base URL.
async fn endpoint(counts: Arc<Counts>) -> String {
    let runs = Arc::clone(&counts);
    let (slow, busy) = (Arc::clone(&counts), Arc::clone(&counts));
    let app = Router::new()
        .route(
            "/slow",
            post(move || {
                let slow = Arc::clone(&slow);
                async move {
                    slow.slow_runs.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(SLOW).await;
                    "granted slowly"
                }
            }),
        )
        .route(
            "/busy",
            post(move || {
                let busy = Arc::clone(&busy);
                async move {
                    if busy.busy_calls.fetch_add(1, Ordering::SeqCst) == 0 {
                        let mut answer = axum::response::Response::new(axum::body::Body::empty());
                        *answer.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                        answer
                            .headers_mut()
                            .insert("retry-after", axum::http::HeaderValue::from_static("1"));
                        answer
                    } else {
                        axum::response::Response::new(axum::body::Body::from("granted"))
                    }
                }
            }),
        )
        .route(
            "/grants",
            post(move || {
                let runs = Arc::clone(&runs);
                async move {
                    runs.runs.fetch_add(1, Ordering::SeqCst);
                    "granted"
                }
            }),
        )
        .route(
            "/broken",
            post(|| async { StatusCode::INTERNAL_SERVER_ERROR }),
        )
        .layer(
            IdempotencyLayer::builder(MemoryStore::new())
                .shared_scope()
                .namespace("grants")
                .build(),
        )
        .layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let counts = Arc::clone(&counts);
                async move {
                    counts.requests.fetch_add(1, Ordering::SeqCst);
                    next.run(request).await
                }
            },
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

/// A relay dies after the endpoint answered its batch and before marking it (the documented
/// `after_deliver` hook panics there); once its lease ends another relay posts the batch again
/// with the same `Idempotency-Key`s: the endpoint saw every request twice, its handler ran once
/// per message.
#[tokio::test]
async fn a_batch_posted_again_after_a_dead_relay_runs_the_handler_once() {
    let Some(outbox) = fresh_outbox().await else {
        return;
    };
    let counts = Arc::new(Counts::default());
    let base = endpoint(Arc::clone(&counts)).await;
    let messages: Vec<_> = (0..5)
        .map(|n| message(&format!("H{n}"), "/grants"))
        .collect();
    enqueue_committed(&outbox, &messages).await;

    let doomed = Relay::new(outbox.clone(), HttpTarget::new(&base))
        .with_lease(Duration::from_secs(1))
        .with_after_deliver(|_| panic!("the relay dies between posting and marking"));
    let died = tokio::spawn(async move { doomed.deliver_due().await }).await;
    assert!(died.unwrap_err().is_panic());
    assert_eq!(counts.runs.load(Ordering::SeqCst), 5);
    assert_eq!(outbox.counts().await.unwrap().sent, 0);

    let relay = Relay::new(outbox.clone(), HttpTarget::new(&base));
    deliver_until_sent(&relay, 5, Duration::from_secs(30)).await;
    assert_eq!(counts.requests.load(Ordering::SeqCst), 10);
    assert_eq!(
        counts.runs.load(Ordering::SeqCst),
        5,
        "replayed, not run again"
    );
}

/// An error status refuses the message (counted, dead at the last attempt); a closed port makes
/// it unreachable (not counted).
#[tokio::test]
async fn an_error_status_is_refused_and_a_closed_port_unreachable() {
    let Some(outbox) = fresh_outbox().await else {
        return;
    };
    let base = endpoint(Arc::default()).await;
    let broken = message("broken", "/broken");
    enqueue_committed(&outbox, std::slice::from_ref(&broken)).await;
    let relay = Relay::new(outbox.clone(), HttpTarget::new(&base))
        .with_max_attempts(2)
        .with_backoff(Backoff::new(
            Duration::from_millis(1),
            Duration::from_millis(1),
        ));
    let round = refuse_until_dead(&relay).await;
    assert_eq!((round.refused, round.dead), (1, 1));
    let listed = outbox.dead(10).await.unwrap();
    assert!(
        listed[0]
            .last_error
            .as_deref()
            .unwrap_or("")
            .contains("500")
    );

    // A port nothing listens on: bind one, then close it.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    enqueue_committed(&outbox, &[message("nobody", "/grants")]).await;
    let relay = Relay::new(outbox.clone(), HttpTarget::new(closed));
    let round = relay.deliver_due().await.unwrap();
    assert_eq!((round.claimed, round.unreachable, round.refused), (1, 1, 0));
}

/// A delivery of the message whose first delivery is still running at the receiver (its
/// idempotency layer answers 409): deferred, not counted, even with one attempt allowed; once
/// the first finishes, the next delivery gets the replay. The handler ran once.
#[tokio::test]
async fn a_409_from_a_key_in_flight_defers_without_counting() {
    let Some(outbox) = fresh_outbox().await else {
        return;
    };
    let counts = Arc::new(Counts::default());
    let base = endpoint(Arc::clone(&counts)).await;
    let slow = message("slow", "/slow");
    enqueue_committed(&outbox, std::slice::from_ref(&slow)).await;

    // A first delivery of the same message (a relay whose lease ended, say), still running.
    let first = {
        let (base, slow) = (base.clone(), slow.clone());
        tokio::spawn(async move {
            let claimed = Claimed {
                seq: 0,
                claim: 0,
                attempts: 0,
                age: Duration::ZERO,
                message: slow,
            };
            HttpTarget::new(base).deliver(&[claimed]).await
        })
    };
    support::wait_until(
        "the first delivery to run",
        Duration::from_secs(5),
        || async { counts.slow_runs.load(Ordering::SeqCst) == 1 },
    )
    .await;

    let relay = Relay::new(outbox.clone(), HttpTarget::new(&base)).with_max_attempts(1);
    let round = relay.deliver_due().await.unwrap();
    assert_eq!(
        (round.claimed, round.deferred, round.refused, round.dead),
        (1, 1, 0, 0),
        "{round:?}"
    );
    assert_eq!(outbox.dead(10).await.unwrap(), []);
    assert_eq!(
        relay.deliver_due().await.unwrap().claimed,
        0,
        "not due again at once"
    );

    assert_eq!(first.await.unwrap(), [Ok(())]);
    deliver_until_sent(&relay, 1, Duration::from_secs(10)).await;
    assert_eq!(
        counts.slow_runs.load(Ordering::SeqCst),
        1,
        "the handler ran once"
    );
    let counted = outbox.counts().await.unwrap();
    assert_eq!((counted.pending, counted.sent, counted.dead), (0, 1, 0));
}

/// A 429 with `Retry-After: 1` defers the message (not counted) until then: it is not due
/// before, and delivered after.
#[tokio::test]
async fn a_429_defers_until_its_retry_after() {
    let Some(outbox) = fresh_outbox().await else {
        return;
    };
    let counts = Arc::new(Counts::default());
    let base = endpoint(Arc::clone(&counts)).await;
    enqueue_committed(&outbox, &[message("busy", "/busy")]).await;
    let relay = Relay::new(outbox.clone(), HttpTarget::new(&base)).with_max_attempts(1);
    let round = relay.deliver_due().await.unwrap();
    assert_eq!((round.deferred, round.dead), (1, 0), "{round:?}");
    let due = outbox.next_due().await.unwrap().unwrap();
    assert!(
        due > Duration::from_millis(500) && due <= Duration::from_secs(1),
        "due in {due:?}"
    );
    tokio::time::sleep(due).await;
    deliver_until_sent(&relay, 1, Duration::from_secs(10)).await;
    assert_eq!(counts.busy_calls.load(Ordering::SeqCst), 2);
}

/// A relay purges the messages it sent once past its retention, copying them to its archive
/// table first: each lands there once.
#[tokio::test]
async fn a_relay_archives_the_sent_messages_it_purges() {
    let Some(outbox) = fresh_outbox().await else {
        return;
    };
    let base = endpoint(Arc::default()).await;
    let messages: Vec<_> = (0..3)
        .map(|n| message(&format!("A{n}"), "/grants"))
        .collect();
    enqueue_committed(&outbox, &messages).await;
    let archive = support::unique("outbox_archive");
    let relay = Relay::new(outbox.clone(), HttpTarget::new(&base))
        .with_retention(Duration::ZERO)
        .with_archive(Archive::Table(archive.clone()));
    assert_eq!(relay.drain().await.unwrap().sent, 3);
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(relay.purge().await.unwrap(), 3);
    assert_eq!(relay.purge().await.unwrap(), 0);
    let mut archived = outbox.archived_ids(&archive).await;
    archived.sort();
    let mut ids: Vec<String> = messages.iter().map(|m| m.id.clone()).collect();
    ids.sort();
    assert_eq!(archived, ids);
    assert_eq!(outbox.counts().await.unwrap().sent, 0);
}
